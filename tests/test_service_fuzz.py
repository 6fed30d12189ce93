"""Schema fuzzing of the service's OpenAPI document (`/v1/openapi.json`) with schemathesis: every
operation gets generated requests, valid and invalid, and no answer may be a server error; each
must also be one of the operation's documented status codes, in a documented content type.

The API runs under Uvicorn in a thread on 127.0.0.1 on its own SQLite store, with no workers (a
submitted job stays queued). The store holds ids 1 and 2 of everything: projects `team` and `other`,
uploaded ONNX models, datasets, targets and jobs (job 1 done, with candidates and a recipe, so its
model exports; job 2 queued). Two of every three valid requests name these ids and projects in
place of the generated ones, so that they reach past the lookups. The fuzzer calls with an admin
key; a second pass sends generated credentials. Derandomized: the same requests every run. What
the fuzzer cannot reach (an upload's file by its suffix, a form field's JSON) is sent by hand."""

from __future__ import annotations

import io
import json

import httpx
import pytest
import torch
from service_server import InThread, onnx_linear

from agnitra.service import queue
from agnitra.service.app import ServiceConfig, create_app
from agnitra.service.serve import make_key
from agnitra.store.service_schema import JobRow

EXAMPLES = 8  # an operation, in each mode (15 took 65 s of the suite's CPU)
IDS = ("model_id", "job_id", "dataset_id")


class Fuzzed:
    """The service with two of everything, and the admin key's headers."""

    def __init__(self, folder) -> None:
        db_url = f"sqlite:///{folder}/store.db"
        self.app = create_app(ServiceConfig(db_url, folder / "data", rate_limit=0))
        admin = make_key("fuzz admin", "admin", None, db_url)
        self.headers = {"Authorization": f"Bearer {admin}", "X-API-Key": admin}
        self.running = InThread(self.app)
        self.url = self.running.url
        self._fill(onnx_linear(folder))

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60)

    def _fill(self, model: bytes) -> None:
        rows = io.BytesIO()
        torch.save(torch.randn(2, 8), rows)
        with self.client() as client:
            for number, name in enumerate(("team", "other"), 1):
                made = [client.post("/v1/projects", json={"name": name}),
                        client.post("/v1/models/import", data={"project": name, "name": "linear"}, files={"file": ("linear.onnx", model)}),
                        client.post("/v1/datasets", data={"project": name, "name": "rows"}, files={"file": ("rows.pt", rows.getvalue())}),
                        client.post("/v1/targets", json={"project": name, "name": "cpu", "device": "cpu"}),
                        client.post("/v1/jobs/optimize", json={"model_id": number, "settings": {"budget": "10s"}})]
                assert [m.status_code for m in made] == [201] * 5, [m.text for m in made]
        with self.app.state.store.session() as session:  # job 1 finished, as a worker leaves it; job 2 stays queued
            job = session.get(JobRow, 1)
            job.status, job.finished_at = "done", queue.now()
            job.result = {"verdict": "no-gain", "speedup": 1.0, "chosen": "baseline", "recipe": {"steps": []},
                          "candidates": [{"name": "baseline", "status": "ok", "latency_ms": {"median": 2.0}},
                                         {"name": "threads", "status": "ok", "latency_ms": {"median": 2.1}}], "pareto": ["baseline"]}

    def stop(self) -> None:
        self.running.stop()
        self.app.state.store.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    running = Fuzzed(tmp_path_factory.mktemp("fuzz"))
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def given_ceilings(monkeypatch, tmp_path):
    """A cache of this test's own with the CPU's ceilings given: a recommendation describes the
    device, and measuring it would take seconds."""
    from agnitra.telemetry.ceilings import CEILINGS_VERSION, ceilings_path
    from agnitra.telemetry.signature import device_signature

    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path / "cache"))
    path = ceilings_path(tmp_path / "cache", device_signature(torch.device("cpu")))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": CEILINGS_VERSION, "copy_gbps": 10.0, "matmul_tflops": {"float32": 0.1}}))


@pytest.fixture(scope="module")
def api(service):
    import schemathesis  # here, not at collection: with hypothesis, ~4 s of every pytest worker's start

    return schemathesis.openapi.from_url(service.url + "/v1/openapi.json")


def _steer(case, number: int | None):
    """The case with its ids and project names those of row `number` (1 or 2; None: as generated)."""
    if number is None:
        return case
    project = ("team", "other")[number - 1]
    for name, value in (case.path_parameters or {}).items():
        if name == "candidate_id":
            case.path_parameters[name] = f"{number}-{number - 1}"
        elif name in IDS and isinstance(value, int):
            case.path_parameters[name] = number
    if isinstance(case.query, dict) and "project" in case.query:
        case.query["project"] = project
    if isinstance(case.body, dict):
        for name in IDS:
            if isinstance(case.body.get(name), int) and not isinstance(case.body[name], bool):
                case.body[name] = number
        if isinstance(case.body.get("project"), str):
            case.body["project"] = project
    return case


def fuzz(api, headers: dict | None, modes: tuple | None = None, examples: int = EXAMPLES) -> tuple[list[str], dict[str, list[int]]]:
    """Every operation fuzzed in each mode (`headers`: sent as they are, else generated; `modes`:
    default positive and negative): each failure in a paragraph, and the statuses each operation answered."""
    import hypothesis
    from hypothesis import HealthCheck, Phase
    from hypothesis import strategies as st
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

    checks = [not_a_server_error, status_code_conformance, content_type_conformance]
    modes = modes or (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    failures, answered = [], {}
    for result in api.get_all_operations():
        operation = result.ok()
        for mode in modes:
            cases = operation.as_strategy(mode, headers=headers)
            if mode == GenerationMode.POSITIVE and headers:
                cases = st.builds(_steer, cases, st.sampled_from([None, 1, 2]))

            @hypothesis.settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=[Phase.explicit, Phase.generate],
                                 suppress_health_check=list(HealthCheck), print_blob=False)
            @hypothesis.given(cases)
            def one(case) -> None:
                status = case.call_and_validate(headers=headers, checks=checks, timeout=30).status_code
                answered.setdefault(operation.label, []).append(status)

            try:
                one()
            except hypothesis.errors.Unsatisfiable:  # negative mode: the operation has nothing to make invalid (no parameters)
                pass
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - the checks' failures, or an error: reported with the operation
                failures.append(f"{operation.label} ({mode}): {exc}")
    return failures, answered


def test_no_operation_answers_a_server_error_or_an_undocumented_status(api, service):
    failures, answered = fuzz(api, service.headers)
    assert not failures, "\n\n".join(failures)
    assert sum(map(len, answered.values())) > 250
    succeeded = [label for label, statuses in answered.items() if any(s < 300 for s in statuses)]
    assert len(succeeded) >= 15, answered  # past the lookups (of 21: the uploads' generated files are never models or tensors)


def test_generated_credentials_are_refused_not_an_error(api):
    from schemathesis import GenerationMode

    failures, answered = fuzz(api, None, modes=(GenerationMode.POSITIVE,), examples=5)
    assert not failures, "\n\n".join(failures)
    assert {s for label, statuses in answered.items() for s in statuses if label not in ("GET /v1/health", "GET /metrics")} <= {401, 422}


@pytest.mark.parametrize("method, path, request_, status, says", [
    ("post", "/v1/models/import", {"json": {"project": "team", "name": "m", "zoo": "bert-base", "options": []}}, 422, "options: Input should be a valid dictionary"),
    ("post", "/v1/models/import", {"json": {"project": "team", "zoo": "bert-base"}}, 422, "name: Field required; a zoo import is a JSON object"),
    ("post", "/v1/models/import", {"json": [1, 2]}, 422, "the body: Input should be a valid dictionary"),
    ("post", "/v1/models/import", {"data": {"project": "team", "name": "m", "options": "{not json"}, "files": {"file": ("m.onnx", b"x")}}, 422,
     "the form field options is not JSON (JSONDecodeError"),
    ("post", "/v1/models/import", {"data": {"project": "team", "name": "m", "options": "[1]"}, "files": {"file": ("m.onnx", b"x")}}, 422,
     "options must be a JSON object of model options (batch,"),
    ("post", "/v1/models/import", {"data": {"project": "team", "name": "m" * 201}, "files": {"file": ("m.onnx", b"x")}}, 422, "at most 200 characters"),
    ("post", "/v1/models/import", {"data": {"project": "team", "name": "m"}, "files": {"file": ("m.onnx", b"x")}}, 422, "m.onnx is not a valid ONNX model"),
    ("post", "/v1/datasets", {"data": {"project": "team", "name": "d"}, "files": {"file": ("d.pt", b"x")}}, 422, "d.pt cannot be read as tensors"),
    ("post", "/v1/jobs/optimize", {"json": {"model_id": 1, "settings": {"budget": 10 ** 400}}}, 422, "budget must be a positive duration"),
    ("post", "/v1/jobs/optimize", {"json": {"model_id": 1}, "headers": {"Idempotency-Key": "k" * 201}}, 422, "at most 200 characters"),
    ("post", "/v1/jobs/optimize", {"json": {"model_id": 1 << 63}}, 404, f"no model {1 << 63}"),
    ("get", "/v1/candidates/99999999999999999999-0", {}, 404, "no job 99999999999999999999"),
    ("get", "/v1/candidates/1-x", {}, 422, "String should match pattern"),
    ("get", "/v1/jobs", {"params": {"offset": 1 << 63}}, 422, "less than or equal to 2147483647"),
])
def test_requests_past_the_fuzzer_are_refused_with_their_reason(service, method, path, request_, status, says):
    with service.client() as client:
        answer = getattr(client, method)(path, **request_)
    assert answer.status_code == status and says in answer.text, answer.text
    if isinstance(answer.json()["detail"], str):
        assert "\n" not in answer.json()["detail"]

"""The service through a real server on 127.0.0.1 (`agnitra serve` and its worker as processes, a
SQLite store in a temporary folder): keys and roles on every endpoint, imports, the job queue with
idempotent submission, a job's outcome, and recovery after `kill -9` of the worker running it."""

from __future__ import annotations

import re
import time

import psutil
import pytest
import torch
from service_server import QUICK_JOB, TINY_BERT, Server, store_head
from service_server import onnx_linear as _onnx_linear
from service_server import wait as _wait


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("service"), 1, "--max-upload-mb", "1")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def linear(server, tmp_path_factory):
    """Projects team and other, and a small ONNX model uploaded to team: jobs on it take seconds, not
    the budget of a transformer (a zoo model's import, seconds of imports in the server, is read in
    test_service_data.py)."""
    admin = server.client(server.admin)
    assert admin.post("/v1/projects", json={"name": "team"}).status_code == 201
    assert admin.post("/v1/projects", json={"name": "other"}).status_code == 201
    made = admin.post("/v1/models/import", data={"project": "team", "name": "linear"}, files={"file": ("linear.onnx", _onnx_linear(tmp_path_factory.mktemp("onnx")))})
    assert made.status_code == 201, made.text
    return made.json()


def test_health_openapi_and_headers(server):
    anyone = server.client(None)
    health = anyone.get("/v1/health")
    assert health.json() == {"status": "ok", "store": store_head()}
    assert health.headers["x-content-type-options"] == "nosniff" and health.headers["x-frame-options"] == "DENY"
    paths = anyone.get("/v1/openapi.json").json()["paths"]
    assert {"/v1/projects", "/v1/models/import", "/v1/jobs/optimize", "/v1/jobs/{job_id}", "/v1/pareto/{job_id}", "/v1/audit/logs"} <= set(paths)


def test_every_endpoint_needs_a_key_with_the_role(server, linear):
    viewer, editor, other = server.client(server.key("viewer")), server.client(server.key("editor")), server.client(server.key("editor", "other"))
    assert server.client(None).get("/v1/projects").status_code == 401
    assert server.client("agn_not-a-key").get("/v1/projects").status_code == 401
    assert viewer.get(f"/v1/models/{linear['id']}").status_code == 200
    assert viewer.post("/v1/projects", json={"name": "mine"}).status_code == 403
    assert viewer.post("/v1/jobs/optimize", json={"model_id": linear["id"], "settings": QUICK_JOB}).status_code == 403
    assert editor.post("/v1/projects", json={"name": "mine"}).status_code == 403
    assert viewer.get("/v1/audit/logs").status_code == 403 and editor.get("/v1/audit/logs").status_code == 403
    assert other.get(f"/v1/models/{linear['id']}").status_code == 403  # a key of another project
    assert other.post("/v1/models/import", json=TINY_BERT).status_code == 403
    assert [p["name"] for p in other.get("/v1/projects").json()] == ["other"]


def test_imports_are_checked(server, linear, tmp_path):
    editor = server.client(server.key("editor"))
    assert editor.post("/v1/models/import", json={**TINY_BERT, "options": {"colour": "red"}}).status_code == 422
    assert editor.post("/v1/models/import", json={**TINY_BERT, "zoo": "no-such-model"}).status_code == 422
    onnx = _onnx_linear(tmp_path)
    made = editor.post("/v1/models/import", data={"project": "team", "name": "linear"}, files={"file": ("tiny.onnx", onnx)})
    assert made.status_code == 201, made.text
    assert made.json()["kind"] == "onnx" and made.json()["size_bytes"] == len(onnx) and len(made.json()["sha256"]) == 64
    pickled = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(8, 4), pickled)  # a whole pickled module: loading it runs code
    form = {"project": "team", "name": "pickled", "options": '{"input_shapes": ["2x8"]}'}
    refused = editor.post("/v1/models/import", data=form, files={"file": ("model.pt", pickled.read_bytes())})
    assert refused.status_code == 422 and "pickle" in refused.json()["detail"] and "model.pt" in refused.json()["detail"], refused.text
    assert str(server.folder) not in refused.text
    big = editor.post("/v1/models/import", data={"project": "team", "name": "big"}, files={"file": ("big.onnx", b"0" * (3 << 20))})
    assert big.status_code == 413


def test_a_job_runs_once_and_reports(server, linear):
    editor = server.client(server.key("editor"))
    body = {"model_id": linear["id"], "settings": QUICK_JOB}
    first = editor.post("/v1/jobs/optimize", json=body, headers={"Idempotency-Key": "release-1"})
    again = editor.post("/v1/jobs/optimize", json=body, headers={"Idempotency-Key": "release-1"})
    assert first.status_code == 201 and again.status_code == 200 and again.json()["id"] == first.json()["id"]
    job = _wait(editor, first.json()["id"])
    assert job["status"] == "done", (job.get("error"), job["events"])
    assert job["outcome"]["verdict"] and job["outcome"]["recipe"]["version"] == "agnitra.recipe/1"
    assert [e["message"] for e in job["events"]][:2] == ["queued", f"running (attempt 1, worker {job['events'][1]['message'].split('worker ')[1]}"]
    listed = editor.get("/v1/jobs", params={"project": "team", "status": "done"}).json()
    assert first.json()["id"] in [j["id"] for j in listed["jobs"]]
    measured = job["outcome"]["candidates"]
    if measured:
        assert editor.get(f"/v1/candidates/{job['id']}-0").json()["job"] == job["id"]
    assert editor.get(f"/v1/candidates/{job['id']}-{measured}").status_code == 404
    assert editor.get(f"/v1/pareto/{job['id']}", params={"format": "csv"}).text.startswith("candidate,name,latency_ms")
    actions = [entry["action"] for entry in server.client(server.admin).get("/v1/audit/logs").json()]
    assert actions.count("job.submit") >= 1 and "model.import" in actions and "project.create" in actions


@pytest.mark.parametrize("body, fragment", [
    ({"type": "layout"}, "layout re-permutation is not in the core yet"),
    ({"type": "nas"}, "architecture search is not in the core"),
    ({"settings": {"colour": "red"}}, "unknown setting(s) colour"),
    ({"settings": {"budget": "soon"}}, "budget must be a positive duration"),
    ({"constraints": {"latency_p95_ms": 5}}, "constraint latency_p95_ms is not supported yet"),
])
def test_a_job_the_core_cannot_do_is_refused(server, linear, body, fragment):
    refused = server.client(server.key("editor")).post("/v1/jobs/optimize", json={"model_id": linear["id"], **body})
    assert refused.status_code == 422 and fragment in refused.text


def test_a_job_survives_kill_9_of_its_worker(server, linear):
    """The server's worker takes the job and is killed outright while it runs: the job's process
    dies with it; the server starts a worker in its place, the lease lapses, the new worker runs
    the job from the start, and its run is recorded once."""
    from agnitra.store import counts, open_store

    store = open_store(server.env["AGNITRA_DB_URL"])
    runs = counts(store)["runs"]
    admin = server.client(server.admin)
    job = admin.post("/v1/jobs/optimize", json={"model_id": linear["id"], "settings": QUICK_JOB}).json()
    running = _wait(admin, job["id"], until=("running",), seconds=60)
    owner = re.search(r"running \(attempt 1, worker .*:(\d+):[0-9a-f]+\)$", running["events"][-1]["message"])
    assert owner, running["events"]
    worker = psutil.Process(int(owner[1]))
    assert worker.ppid() == server.process.pid
    deadline = time.monotonic() + 30
    while not (job_process := worker.children()) and time.monotonic() < deadline:  # what the job starts in turn is the job's to stop
        time.sleep(0.1)
    assert job_process, "the job's process is not the worker's"
    worker.kill()
    _, alive = psutil.wait_procs(job_process, timeout=30)
    assert not [p for p in alive if _alive(p)], "the job's process outlived its worker"
    done = _wait(admin, job["id"], seconds=240)
    assert done["status"] == "done" and done["attempts"] == 2, done
    assert any("stopped renewing its lease: queued again" in e["message"] for e in done["events"])
    assert counts(store)["runs"] == runs + 1
    store.close()


def _alive(process: psutil.Process) -> bool:
    """Running, not a zombie (one whose parent died is reaped by init, which a container may not do)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

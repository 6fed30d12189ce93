"""The LLM advisor end to end against a real OpenAI-compatible HTTP server on 127.0.0.1 (a
`http.server` in a thread speaking chat completions, with canned replies chosen by the request's
model name): valid recipes measured first and credited in the report, bad ones rejected with the
reason, and every way the endpoint can fail leaving the run going with a one-line note."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from torch import nn

import agnitra
from agnitra.errors import UserError
from agnitra.results import DeviceReport
from agnitra.search.advisor import AdvisorSettings, Asking
from agnitra.search.advisor.prompt import facts
from agnitra.search.space import recipe_space
from agnitra.search.strategies.auto import Auto
from agnitra.search.strategies.warm_start import WarmStart, led_by
from agnitra.transforms.base import TRANSFORMS, Choice, Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import ModelWrapper
from agnitra.workloads.base import TaskKind, Workload
from seeded_cache import seeded_cache

CPU = torch.device("cpu")
WEIGHT = 0.123456789  # every weight of the test model: the prompt must not carry it


class _Sleepy(nn.Module):
    """Slow (4 ms a call) unless a transform made it fast."""

    def __init__(self) -> None:
        super().__init__()
        self.linear, self.fast = nn.Linear(32, 8), False
        nn.init.constant_(self.linear.weight, WEIGHT)

    def forward(self, x):
        if not self.fast:
            time.sleep(0.004)
        return self.linear(x)


def _sleepy() -> Workload:
    make = lambda seed: (torch.randn(4, 32, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("sleepy", _Sleepy().eval(), make(0), TaskKind.GENERIC, batch=4, make_inputs=make)


class _Slower(ModelWrapper):
    def __init__(self, inner, ms: int) -> None:
        super().__init__(inner)
        self.ms = ms

    def forward(self, *args):
        time.sleep(self.ms / 1000)
        return self.inner(*args)


class AdvisorFast(Transform):
    name = "advisor-fast"
    description = "skips the model's sleep"

    def apply(self, model, ctx, params):
        model.fast = True
        return model


class AdvisorSlow(Transform):
    name = "advisor-slow"
    description = "sleeps before each call"

    @dataclass
    class Params:
        ms: int = 4

    def choices(self, ctx):
        return [Choice(self.name, (), 1.5)]  # the default order's first: the advisor's fast one must go before it

    def apply(self, model, ctx, params):
        return _Slower(model, params.ms)


for _cls in (AdvisorFast, AdvisorSlow):
    if _cls.name not in TRANSFORMS:
        register_transform(_cls)
SEARCHED = ["advisor-fast", "advisor-slow"]

PROPOSALS = {"recipes": [
    {"steps": [{"transform": "advisor-fast", "params": {}}], "rationale": "the sleep is the hotspot"},
    {"steps": [{"transform": "warp-drive"}], "rationale": "go faster"},
    {"steps": [{"transform": "advisor-slow", "params": {"ms": "long"}}], "rationale": "a bad type"},
    {"steps": [{"transform": "advisor-slow", "params": {"ms": 9}}], "rationale": "not a choice searched here"},
    {"steps": [{"transform": "threads", "params": {}}], "rationale": "not searched in this run"},
    {"steps": [{"transform": "advisor-fast", "params": {}, "shell": "rm -rf ~"}], "rationale": "unsafe"},
    {"steps": [{"transform": "advisor-fast"}], "rationale": "the same again"},
]}


# ---- the endpoint: chat completions over real HTTP, its behaviour chosen by the model name ----------


def _completion(model: str, content: str) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class _Endpoint(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "authorization": self.headers.get("Authorization"), "body": body})
        model = body.get("model")
        try:
            if model == "rate-limited":
                return self._send(429, {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}, {"Retry-After": "7"})
            if model == "broken":
                return self._send(500, {"error": {"message": "the model crashed", "type": "server_error"}})
            if model == "needs-key" and self.headers.get("Authorization") != "Bearer sesame":
                return self._send(401, {"error": {"message": "no key", "type": "invalid_request_error"}})
            if model == "slow":
                time.sleep(8.0)
            content = {"prose": "Sure! Try torch.compile, it usually helps.", "wrong-schema": json.dumps({"ideas": ["compile"]})}.get(model, json.dumps(PROPOSALS))
            self._send(200, _completion(model, content))
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (the slow endpoint)
            pass

    def _send(self, status: int, doc: dict, headers: dict | None = None) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    server.daemon_threads, server.requests = True, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", server
    server.shutdown()
    server.server_close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def advised_run(endpoint, tmp_path_factory):
    """One optimize run with the `llm` strategy against the canned proposals (shared by the tests below)."""
    url, server = endpoint
    out = tmp_path_factory.mktemp("advised")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AGNITRA_CACHE_DIR", str(seeded_cache(tmp_path_factory.mktemp("advisor-cache"))))
        env.setenv("AGNITRA_DB_URL", f"sqlite:///{out.parent / 'advised-store.db'}")
        env.setenv("AGNITRA_COSTMODEL_SEED", "0")
        env.setenv("AGNITRA_LLM_API_KEY", "sesame")
        env.delenv("AGNITRA_DEVICE", raising=False)
        count = len(server.requests)
        fast = agnitra.optimize(_sleepy(), device="cpu", strategy="llm", transforms=SEARCHED, peers=[], budget="60s", out=out,
                                advisor=url, advisor_model="canned")
    return fast, out, server.requests[count:]


def test_a_valid_proposal_is_measured_first_and_credited(advised_run):
    fast, out, _ = advised_run
    report = fast.report
    assert report.candidates[0].name == "advisor-fast"  # the default order would start with advisor-slow (prior 1.5)
    assert report.chosen == "advisor-fast" and report.search["proposed_by"] == "advisor"
    assert report.verdict.endswith("; proposed by the advisor")
    assert any(n.startswith("llm: the advisor's 1 valid recipe(s) first") for n in report.search["notes"])
    saved = json.loads((out / "report.json").read_text())
    first = saved["search"]["advisor"]["proposals"][0]
    assert first["recipe"] == "advisor-fast" and first["status"] == "passed" and first["speedup"] > 1.0
    assert "LLM advisor" in (out / "report.html").read_text()


def test_bad_proposals_are_rejected_with_the_reason(advised_run):
    fast, _, _ = advised_run
    advisor = fast.report.search["advisor"]
    reasons = [(p["status"], p["reason"]) for p in advisor["proposals"][1:]]
    assert all(status == "rejected" for status, _ in reasons)
    expected = ["unknown transform 'warp-drive'", "parameter ms='long' should be int", "advisor-slow(ms=9) is not among the choices searched here for advisor-slow (advisor-slow(ms=4))",
                "threads is not searched in this run", "unsafe: step 1 asks for shell", "the same recipe as proposal 1"]
    for (_, reason), part in zip(reasons, expected, strict=True):
        assert part in reason
    assert "7 recipe(s) proposed" in advisor["outcome"] and "1 valid and measured first, 6 rejected" in advisor["outcome"]
    assert advisor["outcome"] in fast.report.search["notes"]
    assert not any("warp-drive" in c.name or "ms=9" in c.name for c in fast.report.candidates)


def test_the_prompt_and_reply_are_saved_and_the_prompt_carries_no_tensor_data(advised_run):
    _, out, requests = advised_run
    assert len(requests) == 1
    request = requests[0]
    assert request["path"] == "/v1/chat/completions" and request["authorization"] == "Bearer sesame"
    body = request["body"]  # the chat-completions schema
    assert body["model"] == "canned" and [m["role"] for m in body["messages"]] == ["system", "user"]
    assert all(isinstance(m["content"], str) for m in body["messages"]) and body["response_format"] == {"type": "json_object"}
    prompt = json.loads((out / "advisor" / "prompt.json").read_text())
    assert prompt["request"] == body and "sesame" not in (out / "advisor" / "prompt.json").read_text()
    shown = json.loads(body["messages"][1]["content"])
    assert shown["hotspots"] and {"module", "op_kind", "time_share", "gflops", "bound"} <= set(shown["hotspots"][0])
    assert "linear" in {h["module"] for h in shown["hotspots"]} and shown["hotspots"][0]["time_share"] is not None
    assert "matmul" in {h["op_kind"] for h in shown["hotspots"]} and "matmul" in shown["op_mix"]
    slow = next(t for t in shown["transforms"] if t["name"] == "advisor-slow")
    assert slow["parameters"] == {"ms": {"type": "int", "default": 4}} and slow["choices"] == [{"params": {"ms": 4}, "prior": 1.5, "lossy": False}]
    assert shown["workload"]["inputs"] == [{"shape": [4, 32], "dtype": "float32"}] and shown["device"]["kind"] == "cpu"
    text = body["messages"][1]["content"]
    assert "0.1234" not in text and "tensor(" not in text  # no weight, no input value
    reply = json.loads((out / "advisor" / "reply.json").read_text())
    assert reply["cause"] is None and reply["response"]["choices"][0]["message"]["content"] == json.dumps(PROPOSALS)


def test_the_console_lists_the_proposals(advised_run, capsys, monkeypatch):
    import agnitra.cli as cli
    from agnitra.console_io import UserStreams

    # the console an earlier main() in this process left points at that call's streams
    monkeypatch.setattr(cli, "out", cli._consoles(UserStreams(sys.stdout, sys.stderr))[0])
    cli._render_optimize(advised_run[0].report)
    shown = " ".join(capsys.readouterr().out.split())
    assert "the answer was proposed by advisor" in shown and "passed" in shown and "unknown transform 'warp-drive'" in shown


def test_a_slow_endpoint_leaves_the_run_going_within_its_limit(endpoint, tmp_path, monkeypatch):
    """The call's limit is 10% of the budget (4.5 s of 45 s; the endpoint takes 8 s), spent beside the
    baseline; the default strategy then searches without hints and the report says why."""
    url, _ = endpoint
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    fast = agnitra.optimize(_sleepy(), device="cpu", transforms=SEARCHED, peers=[], budget="45s", out=tmp_path, advisor=url, advisor_model="slow")
    report = fast.report
    assert "advisor: no hints (no reply within 4.5 s (timeout)); the search went on without them" in report.search["notes"]
    assert report.search["advisor"]["proposals"] == [] and report.search["advisor"]["elapsed_s"] < 6.0
    assert report.chosen == "advisor-fast" and report.search["proposed_by"] == "search"
    assert report.verdict.endswith("; proposed by the search, not the advisor")
    assert json.loads((tmp_path / "advisor" / "reply.json").read_text())["cause"].startswith("no reply within")


@pytest.mark.parametrize("model, key, cause", [
    ("rate-limited", None, "rate limited (HTTP 429, retry after 7 s)"),
    ("broken", None, "HTTP 500 from the endpoint (the model crashed)"),
    ("needs-key", None, "HTTP 401: the endpoint refused the request's credentials; AGNITRA_LLM_API_KEY is not set"),
    ("prose", "sesame", "malformed reply: not JSON"),
    ("wrong-schema", "sesame", "malformed reply: JSON without a list of recipes"),
    ("closed", None, "the endpoint could not be reached"),
])
def test_a_failing_endpoint_gives_no_hints_and_says_why(endpoint, model, key, cause, tmp_path, monkeypatch):
    """Each failure as the run meets it (the same `Asking` the run uses), without a run of its own."""
    url, server = endpoint
    if key:
        monkeypatch.setenv("AGNITRA_LLM_API_KEY", key)
    else:
        monkeypatch.delenv("AGNITRA_LLM_API_KEY", raising=False)
    workload = _sleepy()
    ctx = TransformContext(workload, CPU)
    space, skipped = recipe_space(ctx, allowed=set(SEARCHED))
    device = DeviceReport("cpu", "cpu", {"kind": "cpu"}, {})
    count = len(server.requests)
    asking = Asking(AdvisorSettings(_closed_port() if model == "closed" else url, model), lambda: facts(workload, None, device, space, skipped, "latency"), 60.0, tmp_path)
    advice = asking.advice(space, skipped, ctx, set(SEARCHED))
    assert advice.cause.startswith(cause) and advice.candidates == []
    assert advice.note() == f"advisor: no hints ({advice.cause}); the search went on without them"
    assert json.loads((tmp_path / "advisor" / "reply.json").read_text())["cause"] == advice.cause
    if model == "needs-key":
        assert server.requests[count]["authorization"] is None  # no key set: none sent


def test_the_advisor_leads_any_strategy_and_llm_takes_the_store_after_it():
    space, _ = recipe_space(TransformContext(_sleepy(), CPU), allowed=set(SEARCHED))
    fast = next(c for c in space if c.recipe.name == "advisor-fast")
    slow = next(c for c in space if c.recipe.name == "advisor-slow(ms=4)")
    led = led_by(Auto(space), [fast], [slow])
    assert [led.ask().recipe.name for _ in space] == ["advisor-fast", "advisor-slow(ms=4)", "advisor-fast + advisor-slow(ms=4)"]
    from agnitra.search.strategies.base import SearchContext, get_strategy

    llm = get_strategy("llm")(space)
    llm.attach(SearchContext(advised=[fast]))
    assert isinstance(led_by(llm, [fast], [slow]), WarmStart) and llm.first == [fast, slow]


@pytest.mark.parametrize("options, message", [
    ({"advisor": "localhost:8000", "advisor_model": "m"}, "--advisor: 'localhost:8000' is not an http(s) URL"),
    ({"advisor": "http://127.0.0.1:1/v1"}, "--advisor needs --advisor-model NAME"),
    ({"advisor_model": "m"}, "--advisor-model: give the endpoint too"),
    ({"strategy": "llm"}, "--strategy llm measures the advisor's recipes first: give --advisor URL"),
])
def test_advisor_flags_a_user_got_wrong_are_refused_in_one_line(options, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        agnitra.optimize(_sleepy(), device="cpu", budget="20s", **options)


def test_the_cli_refuses_a_bad_advisor_url_before_any_work(capsys, tmp_path):
    from agnitra.cli import main

    code = main(["optimize", "zoo:tinylm", "--device", "cpu", "--advisor", "ftp://example.org", "--advisor-model", "m", "--out", str(tmp_path)])
    assert code == 2 and "--advisor: 'ftp://example.org' is not an http(s) URL" in capsys.readouterr().err


def test_a_reply_is_read_in_a_fence_or_as_a_bare_list():
    from agnitra.search.advisor.proposals import read_reply

    steps = [{"steps": [{"transform": "advisor-fast"}]}]
    assert read_reply("```json\n" + json.dumps({"recipes": steps}) + "\n```") == (steps, "")
    assert read_reply(json.dumps(steps)) == (steps, "")
    assert read_reply('{"recipes": "compile"}')[1].startswith("malformed reply: JSON without a list of recipes")

"""optimize's run folder, budget and isolation: nothing lost, nothing mixed, no limit ignored.

Candidates run in a worker process; these tests give it transforms that sleep, crash the
process or raise, and models that cannot be measured, and check that each ends as a record or a
one-line error, that the budget holds, and that a killed run resumes only its own results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import agnitra
from agnitra.cli import main
from agnitra.errors import UserError
from agnitra.fileio import atomic_write_text
from agnitra.search.run_folder import RunFolder
from agnitra.transforms.base import TRANSFORMS, Transform, register_transform
from agnitra.workloads.base import TaskKind, Workload



def _register(name, apply):
    if name not in TRANSFORMS:
        body = {"name": name, "stage": "module", "description": "test transform", "apply": lambda self, model, ctx, params: apply(model)}
        register_transform(type(f"Safety_{name}", (Transform,), body))


def _sleep_30(model):
    time.sleep(30)
    return model


def _exit_process(model):
    os._exit(3)  # the worker dies outright, as a segfault or the OOM killer would


def _spoils_the_process(model):
    """As a failed CUDA-graph capture: the call answers, but the process's device state is damaged."""
    from agnitra.device import mark_spoiled

    mark_spoiled("a stand-in for a failed capture")
    return model


def _parametrized_failure(model):
    raise RuntimeError("Serialization of parametrized modules is only supported through state_dict()")


def _half_written_compile(model):
    """As a compile stopped while Inductor writes its shared library: an empty artifact."""
    cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "ab"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "cabc.main.so").touch()
    (cache / "cabc.main.so.lock").touch()
    time.sleep(30)
    return model


_register("safety-sleep", _sleep_30)
_register("safety-half-written", _half_written_compile)
_register("safety-exit", _exit_process)
_register("safety-spoils", _spoils_the_process)
for _name in ("safety-fail-a", "safety-fail-b", "safety-fail-c"):
    _register(_name, _parametrized_failure)
_register("safety-identity", lambda model: model)


def _not_here(model):
    from agnitra.errors import NotApplicable

    raise NotApplicable("the forward could not be captured (a stand-in for one that synchronises)")


if "safety-not-here" not in TRANSFORMS:  # a runtime step that finds, as it is applied, that it does not apply
    register_transform(type("Safety_not_here", (Transform,), {"name": "safety-not-here", "stage": "runtime", "description": "test transform",
                                                              "apply": lambda self, model, ctx, params: _not_here(model)}))


def _mlp(name="mlp", width=16) -> Workload:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    make = lambda seed: (torch.randn(2, width, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload(name, model, make(0), TaskKind.GENERIC, batch=2, make_inputs=make)


def _cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _workers_of(parent: int) -> list[int]:
    """Live worker processes of `parent`: its children started as workers, and the children of its
    fork server (`bench.fork_server`: a fresh interpreter or a fork of the parent), which forks its CPU workers."""
    processes = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                processes[int(entry.name)] = (int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]), cmdline)
            except (OSError, ValueError, IndexError):
                continue
    servers = {pid for pid, (ppid, cmdline) in processes.items()
               if ppid == parent and ("multiprocessing.forkserver import main" in cmdline or cmdline == processes.get(parent, (0, None))[1])}
    return sorted(pid for pid, (ppid, cmdline) in processes.items()
                  if ppid in servers or (ppid == parent and "from agnitra.bench.isolated import worker_main" in cmdline))


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# ---- the run folder ---------------------------------------------------------------------------


def test_unwritable_out_is_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    t0 = time.perf_counter()
    code, _, err = _cli(["optimize", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--out", str(blocker / "run")], capsys)
    assert code == 2 and ("cannot be written" in err or "cannot write" in err or "a file, not a folder" in err) and "--out" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert time.perf_counter() - t0 < 10  # refused before the model was built and measured


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "report.txt"
    target.write_text("keep me")
    with pytest.raises(UserError, match="is a file, not a folder"):
        agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity"], budget="30s", peers=[], out=target)
    assert target.read_text() == "keep me"


def test_second_run_on_one_folder_is_refused(tmp_path, capsys):
    with RunFolder(tmp_path):
        with pytest.raises(UserError, match=r"in use by another agnitra run \(pid \d+\)"):
            agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity"], budget="30s", peers=[], out=tmp_path)
        code, _, err = _cli(["optimize", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--out", str(tmp_path)], capsys)
        assert code == 2 and "in use by another agnitra run" in err and len(err.strip().splitlines()) == 1
    # the lock goes with the run that held it
    with RunFolder(tmp_path):
        pass


def test_lock_is_released_when_its_process_is_killed(tmp_path):
    code = f"from agnitra.search.run_folder import RunFolder; import time; f = RunFolder({str(tmp_path)!r}); print('locked', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=f"pid {holder.pid}"):
            RunFolder(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    with RunFolder(tmp_path):
        pass


def test_resume_refuses_another_runs_journal(tmp_path):
    agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity"], budget="40s", peers=[], out=tmp_path)
    with pytest.raises(UserError, match="holds results for another run.*workload") as info:
        agnitra.optimize(_mlp("other-model", width=8), device="cpu", transforms=["safety-identity"], budget="40s", peers=[], out=tmp_path, resume=True)
    assert "run without --resume, or choose another --out" in str(info.value)
    with pytest.raises(UserError, match="tolerances"):
        agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity"], budget="40s", peers=[], out=tmp_path, resume=True, max_error=0.5)


def test_resume_skips_a_damaged_line_and_measures_that_candidate_again(tmp_path):
    first = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity", "safety-fail-a"], budget="40s", peers=[], out=tmp_path)
    journal = tmp_path / "candidates.jsonl"
    header, *lines = journal.read_text().splitlines()
    assert len(lines) == 2
    journal.write_text("\n".join([header, lines[0], lines[1][: len(lines[1]) // 2]]) + "\n")  # killed mid-write
    again = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity", "safety-fail-a"], budget="40s", peers=[], out=tmp_path, resume=True)
    assert again.report.search["reused"] == 1
    assert any("line 3 is damaged" in note for note in again.report.search["notes"])
    assert [c.name for c in again.report.candidates] == [c.name for c in first.report.candidates]
    assert len(journal.read_text().splitlines()) == 4  # the damaged line stays; the candidate measured again


def test_resume_refuses_a_journal_without_header(tmp_path):
    (tmp_path / "candidates.jsonl").write_text('{"name": "x"}\n')
    with pytest.raises(UserError, match="no readable header"):
        agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity"], budget="30s", peers=[], out=tmp_path, resume=True)


def test_resume_without_a_folder_is_refused():
    with pytest.raises(UserError, match="resume needs the run folder"):
        agnitra.optimize(_mlp(), device="cpu", budget="30s", resume=True)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text("old")

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no half-written file left


# ---- timeouts and the budget -------------------------------------------------------------------


def test_candidate_past_its_timeout_is_killed_and_recorded(tmp_path):
    t0 = time.perf_counter()
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-sleep", "safety-identity"], budget="60s", candidate_timeout="2s", peers=[], out=tmp_path)
    elapsed = time.perf_counter() - t0
    by_name = {c.name: c for c in fast.report.candidates}
    assert by_name["safety-sleep"].status == "timeout" and "time limit of 2 s" in by_name["safety-sleep"].reason
    assert by_name["safety-identity"].status == "ok"  # measured after the worker was replaced
    assert fast.report.search["worker_starts"] >= 2  # the killed worker was replaced
    assert by_name["safety-sleep"].eval_s < 10 and elapsed < 60  # the 30 s sleep was cut short
    assert not _workers_of(os.getpid())  # every worker stopped with the run


def test_a_killed_worker_that_does_not_exit_does_not_stall_the_search(tmp_path, monkeypatch):
    """A worker inside a GPU driver call does not die when killed until the driver returns: the
    search waits KILLED_EXIT_S for it, then goes on with a fresh worker, and the report says so.
    (Stand-in: the wait for the killed worker runs out.)"""
    from agnitra.bench import fork_server, isolated

    real_waits = {subprocess.Popen: subprocess.Popen.wait, fork_server.ForkedProcess: fork_server.ForkedProcess.wait}

    def stuck_wait(self, timeout=None):
        real_wait = real_waits[type(self)]
        if timeout == isolated.KILLED_EXIT_S:
            real_wait(self)  # reaped here, reported as if it had not exited
            raise subprocess.TimeoutExpired("worker", timeout)
        return real_wait(self, timeout=timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", stuck_wait)
    monkeypatch.setattr(fork_server.ForkedProcess, "wait", stuck_wait)  # the CPU worker is forked by the fork server
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-sleep", "safety-identity"], budget="60s", candidate_timeout="2s", peers=[], out=tmp_path)
    by_name = {c.name: c for c in fast.report.candidates}
    assert by_name["safety-sleep"].status == "timeout" and by_name["safety-identity"].status == "ok"
    assert any("killed worker process(es) had not exited 30 s later" in n and "the search went on with a fresh one" in n for n in fast.report.search["notes"])


def test_a_stopped_candidate_leaves_no_empty_artifact_in_the_compile_cache(tmp_path, monkeypatch):
    """An empty compiled artifact in Inductor's cache makes every later compile of that entry
    fail ('file too short'), in any process; the one a stopped worker left is removed."""
    cache = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    (cache / "zz").mkdir(parents=True)
    older = cache / "zz" / "cold.main.so"
    older.touch()
    os.utime(older, (time.time() - 3600, time.time() - 3600))  # not written by this run: not ours to judge
    # the budget leaves room for the final-run reserve on a loaded 2-core machine (a worker start
    # there takes seconds); the candidate itself is stopped at its 3-s limit
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-half-written"], budget="90s", candidate_timeout="3s", peers=[], out=tmp_path / "run")
    assert [c.status for c in fast.report.candidates] == ["timeout"]
    assert not (cache / "ab" / "cabc.main.so").exists()
    assert (cache / "ab" / "cabc.main.so.lock").exists() and older.exists()


def test_a_step_that_does_not_apply_is_blamed_not_the_steps_beside_it(tmp_path):
    """bart on the GPU: 'fuse-projections + cuda-graphs' failed to capture, and the search blocked
    fuse-projections (the module step) and went on asking for cuda-graphs. The reason now names the
    step that refused; that step is blocked, the other is measured."""
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity", "safety-not-here"], budget="60s", peers=[], out=tmp_path)
    by_name = {c.name: c for c in fast.report.candidates}
    refused = [c for c in fast.report.candidates if "safety-not-here" in c.name]
    assert len(refused) == 1 and refused[0].status == "skipped"
    assert refused[0].reason.startswith("safety-not-here: the forward could not be captured"), refused[0].reason
    assert by_name["safety-identity"].status == "ok"


def test_a_one_second_timeout_does_not_end_the_run(tmp_path, capsys):
    model_file = tmp_path / "m.py"
    model_file.write_text("import torch\ndef make():\n    return torch.nn.Linear(8, 4), (torch.randn(2, 8),)\n")
    code, out, err = _cli(["optimize", f"{model_file}:make", "--device", "cpu", "--budget", "30s", "--candidate-timeout", "1s", "--transforms", "compile", "--peers", "", "--out", str(tmp_path / "run")], capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["chosen"] is None or report["speedup"] > 1
    assert all(c["status"] in ("ok", "timeout", "failed") for c in report["candidates"])


def test_budget_bounds_the_whole_run(tmp_path):
    t0 = time.perf_counter()
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-sleep", "safety-identity"], budget="15s", peers=[], out=tmp_path)
    elapsed = time.perf_counter() - t0
    where = [n for n in fast.report.search["notes"] if n.startswith("time:")]  # each stage's seconds, when it fails
    assert elapsed <= 15 * 1.1, (elapsed, where)
    assert fast.report.search["elapsed_s"] <= 15 * 1.1, where
    assert {c.name: c.status for c in fast.report.candidates}.get("safety-sleep") in ("timeout", None)


def test_a_crashed_worker_is_a_record_and_the_run_goes_on(tmp_path):
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-exit", "safety-identity"], budget="60s", peers=[], out=tmp_path)
    by_name = {c.name: c for c in fast.report.candidates}
    assert by_name["safety-exit"].status == "failed" and "worker process died (exit code 3)" in by_name["safety-exit"].reason
    assert by_name["safety-identity"].status == "ok"


def test_a_worker_whose_device_state_was_spoiled_is_replaced_for_the_next_candidate(tmp_path):
    """The candidate that spoiled the worker keeps its own result; the next runs in a fresh worker,
    and the report says why it was started."""
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-spoils", "safety-identity"], budget="60s", peers=[], out=tmp_path)
    by_name = {c.name: c for c in fast.report.candidates}
    assert by_name["safety-spoils"].status == "ok" and by_name["safety-identity"].status == "ok"
    # the first, then a fresh one for each call after a recipe with safety-spoils (none is needed after
    # the last one: nothing passed faster, so there is no final run)
    assert fast.report.search["worker_starts"] >= 2
    assert any("worker: started afresh after" in n and "that left its device state damaged (a stand-in for a failed capture)" in n for n in fast.report.search["notes"])


# ---- the baseline ----------------------------------------------------------------------------------


class _BreaksAfterFirstCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("the device is gone")
        return self.linear(x)


class _SlowModel(nn.Module):
    def forward(self, x):
        time.sleep(0.5)
        return x + 1


def test_a_baseline_that_cannot_be_measured_ends_the_run(capsys):
    with pytest.raises(UserError, match="the original model could not be measured: .*the device is gone"):
        agnitra.optimize(_BreaksAfterFirstCall(), (torch.randn(2, 4),), device="cpu", transforms=["safety-identity"], budget="60s", peers=[])


def test_a_baseline_slower_than_the_budget_allows_ends_the_run():
    # 23 calls of 0.5 s in the baseline's run: more than half of a 20 s budget
    with pytest.raises(UserError, match=r"measuring the original model alone took longer than \d+ s \(half of what was left of the budget\); raise --budget"):
        agnitra.optimize(_SlowModel(), (torch.randn(2, 4),), device="cpu", transforms=["safety-identity"], budget="20s", peers=[])


def test_a_budget_spent_on_loading_is_said_in_one_line_without_a_negative_limit(capsys):
    """Loading (its imports, the graph's capture) takes seconds: a budget of one leaves none to measure."""
    with pytest.raises(UserError, match=r"^the 1 s budget was spent before the original model could be measured \(loading it took \d+ s\); raise --budget$"):
        agnitra.optimize(_mlp(), device="cpu", transforms=["safety-identity"], budget="1s", peers=[])


def test_a_non_finite_baseline_ends_the_run():
    model = nn.Linear(4, 4)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with pytest.raises(UserError, match="NaN/Inf values on the held-out inputs; no candidate can be verified against it; fix the model"):
        agnitra.optimize(model, (torch.randn(2, 4),), device="cpu", transforms=["safety-identity"], budget="60s", peers=[])


# ---- what the verdict says -------------------------------------------------------------------------


def test_verdict_names_the_reason_most_candidates_failed_for(tmp_path):
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["safety-fail-a", "safety-fail-b", "safety-fail-c"], budget="60s", peers=[], out=tmp_path)
    assert fast.report.chosen is None
    assert "3 of 3 candidates failed with: RuntimeError: Serialization of parametrized modules" in fast.report.verdict


class _Unpicklable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.lock = threading.Lock()

    def forward(self, x):
        return self.linear(x)


def test_a_model_that_cannot_travel_runs_in_process_and_says_so(tmp_path):
    fast = agnitra.optimize(_Unpicklable(), (torch.randn(2, 4),), device="cpu", transforms=["safety-identity"], budget="60s", peers=[], out=tmp_path)
    assert fast.report.search["isolation"].startswith("in-process (the model cannot be copied into a worker process")
    assert any("stopped only between Python steps" in note for note in fast.report.search["notes"])


def _weight_normed() -> nn.Module:
    from torch.nn.utils.parametrizations import weight_norm

    torch.manual_seed(0)
    conv = weight_norm(nn.Conv1d(4, 4, 3, padding=1), dim=2)  # as wav2vec2's positional convolution
    return nn.Sequential(weight_norm(nn.Linear(4, 4)), nn.Unflatten(1, (4, 1)), conv, nn.Flatten())


def test_a_parametrized_model_travels_to_a_worker_with_the_same_tensors_and_outputs(tmp_path):
    """torch refuses to pickle parametrized modules (weight norm: wav2vec2, vocoders); such a
    model ran its candidates in process, where a time limit cannot stop a compile. It travels
    now: the same class, the same original tensors and parametrizations, the same outputs."""
    from torch.nn.utils import parametrize

    from agnitra.bench.isolated import WorkloadSource, workload_source
    from agnitra.workloads.base import Workload

    model, x = _weight_normed().eval(), torch.randn(3, 4)
    source, why_not = workload_source(model, {}, Workload("wn", model, (x,), TaskKind.ENCODER), torch.device("cpu"))
    assert source is not None and source.pickled, why_not
    copy, _ = WorkloadSource.load(source)
    travelled = copy.model
    assert parametrize.is_parametrized(travelled[0], "weight") and parametrize.is_parametrized(travelled[2], "weight")
    assert [n for n, _ in travelled.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(travelled.parameters(), model.parameters()))
    assert torch.equal(travelled(x), model(x))
    fast = agnitra.optimize(model, (x,), device="cpu", transforms=["safety-identity"], budget="60s", peers=[], out=tmp_path)
    assert fast.report.search["isolation"].startswith("worker"), fast.report.search["isolation"]
    assert parametrize.is_parametrized(model[0], "weight")  # the user's model untouched


# ---- killed, then resumed --------------------------------------------------------------------------

PLUGIN = textwrap.dedent(
    """
    import time
    import torch
    from agnitra.transforms.base import TRANSFORMS, Transform, register_transform

    def _slow(self, model, ctx, params):
        time.sleep(0.4)
        return model

    for name in ("plugin-a", "plugin-b", "plugin-c"):
        if name not in TRANSFORMS:
            register_transform(type("Plugin_" + name.replace("-", "_"), (Transform,), {"name": name, "description": "sleeps", "apply": _slow}))

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), (torch.randn(2, 8),)
    """
)


def _stopped_after(args: list[str], journal: Path, lines: int, sig: int) -> tuple[int, str, int]:
    """Run the CLI until the journal holds `lines` lines, send `sig`, and wait until its workers are
    gone: (its exit code, its stderr, the candidates the journal then holds)."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (journal.is_file() and len(journal.read_text().splitlines()) >= lines):
        time.sleep(0.2)
    workers = _workers_of(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert workers
    deadline = time.monotonic() + 10  # the worker dies with its parent, the fork server as it sees its parent gone
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)
    return proc.returncode, err, len(journal.read_text().splitlines()) - 1


def test_killed_then_interrupted_then_resumed_reuses_what_was_measured(tmp_path):
    """kill -9 mid-search, then a resume stopped by Ctrl-C, then a resume to the end: each resume
    measures only what the journal does not hold, and the last answers for all seven candidates."""
    model_file = tmp_path / "plugin_model.py"
    model_file.write_text(PLUGIN)
    run = tmp_path / "run"
    args = [sys.executable, "-m", "agnitra.cli", "optimize", f"{model_file}:make", "--device", "cpu", "--budget", "90s", "--transforms", "plugin-a,plugin-b,plugin-c", "--peers", "", "--out", str(run)]
    journal = run / "candidates.jsonl"
    _, _, killed_at = _stopped_after(args, journal, 3, signal.SIGKILL)
    assert killed_at >= 2
    code, err, interrupted_at = _stopped_after(args + ["--resume"], journal, killed_at + 3, signal.SIGINT)
    assert code == 130 and interrupted_at > killed_at
    assert err.strip().splitlines()[-1] == f"interrupted; the best verified recipe so far and the partial results are in {run}; resume with --resume"
    done = subprocess.run(args + ["--resume", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    search, candidates = json.loads(done.stdout)["search"], json.loads(done.stdout)["candidates"]
    assert search["reused"] == interrupted_at
    assert len(candidates) == 7  # three alone, three pairs, all three: the rest measured after the resumes


class _Branchy(nn.Module):
    """Takes one path or the other on its input: an export traced on one input freezes one."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


def test_an_export_that_froze_a_branch_is_not_the_answer(tmp_path):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    x = x if x.sum() > 0 else -x  # values of both signs; the example takes the first branch
    fast = agnitra.optimize(_Branchy(), (x,), device="cpu", transforms=["onnxruntime"], budget="90s", peers=[], out=tmp_path)
    ort = [c for c in fast.report.candidates if c.name.startswith("onnxruntime")]
    assert ort and all(not c.passed for c in ort)
    assert fast.report.chosen is None and fast.recipe.steps == ()


def test_verdict_compares_with_the_best_correct_peer_and_names_a_faster_wrong_one():
    from agnitra.results import BenchReport, Correctness, Latency, VariantResult
    from agnitra.search.verdict import win_verdict

    def variant(name, ms, passed=True, interval=None):
        return VariantResult(name, "ok", latency_ms=Latency(ms, ms, ms, ms, 50), correctness=Correctness("cosine", 0.999, passed, 0.99), speedup_interval=interval)

    bench = BenchReport({}, None, {}, [variant("eager", 18.0), variant("compile", 16.0), variant("onnxruntime-int8", 5.0, passed=False), variant("ours", 6.0, interval=[2.9, 3.1])])
    line = win_verdict(bench, bench.variants[3], ["compile", "onnxruntime-int8"])
    assert line.startswith("ours: 3.00x (2.90-3.10) faster than the baseline (18.000 -> 6.000 ms), 2.67x faster than the best peer, compile (16.000 ms)")
    assert "onnxruntime-int8 was faster (5.000 ms) but failed verification" in line


def test_verdict_when_a_peer_wins_says_how_close_the_search_came():
    """A peer that wins is the answer; the line says so and gives the best recipe the search found,
    and never claims that no peer finished (bert-base b1 on the H100: compile reduce-overhead won)."""
    from agnitra.results import BenchReport, Correctness, Latency, VariantResult
    from agnitra.search.verdict import win_verdict

    def variant(name, ms, passed=True):
        return VariantResult(name, "ok", latency_ms=Latency(ms, ms, ms, ms, 50), correctness=Correctness("rel_error", 0.0017, passed, 0.01))

    bench = BenchReport({}, None, {}, [variant("eager", 4.663), variant("compile-reduce-overhead", 0.573), variant("ours", 0.618), variant("ours-wrong", 0.5, passed=False)])
    line = win_verdict(bench, bench.variants[1], ["compile-reduce-overhead"])
    assert "no peer" not in line and "no other peer" not in line
    assert line.endswith("(the peer 'compile-reduce-overhead' won the final run: its recipe is the answer; the best recipe the search found, ours, ran at 0.618 ms (0.93x its speed))")
    two_peers = win_verdict(bench, bench.variants[1], ["compile-reduce-overhead", "compile-max-autotune"])
    assert ", no other peer finished with correct outputs" in two_peers


def test_an_in_process_time_limit_holds_when_its_first_alarm_is_swallowed():
    """Code that catches the first WorkerTimeout (a broad `except` in a library, or a destructor
    where Python drops it) is stopped by the next one: the limit holds within a second."""
    from agnitra.bench.isolated import InProcess, WorkerTimeout

    def stubborn(workload, device, progress=None):
        try:
            time.sleep(5)  # the first alarm lands here and is swallowed
        except Exception:  # noqa: BLE001
            pass
        time.sleep(5)
        return "ran on"

    started = time.perf_counter()
    with pytest.raises(WorkerTimeout):
        InProcess(None, torch.device("cpu")).call(stubborn, timeout=0.3)
    assert time.perf_counter() - started < 2.0


def test_a_journal_started_by_the_cli_resumes_from_the_sdk(tmp_path):
    """The CLI passes the load options at their defaults (size=full, no pickles), the SDK leaves
    them out: the same run either way."""
    import agnitra
    from agnitra.search.run_folder import journal_key
    from agnitra.verify import Tolerances

    model_file = tmp_path / "plugin_model.py"
    model_file.write_text(PLUGIN)
    spec = f"{model_file}:make"
    workload, device = agnitra.prepare_workload(spec, device="cpu")
    report = agnitra.describe_device(device)
    cli = journal_key(spec, {"size": "full", "allow_pickle": False, "dtype": None}, workload, report, Tolerances())
    assert cli == journal_key(spec, {}, workload, report, Tolerances())
    assert cli != journal_key(spec, {"size": "tiny"}, workload, report, Tolerances())

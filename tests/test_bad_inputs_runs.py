"""Faults the user caused that show up once a model is loaded or a run starts: one line naming the
problem and the fix, exit 2, never an internal error; or, where the run can go on, a note.

The CLI runs in-process (`agnitra.cli.main`) on tiny factories written to tmp_path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

import agnitra
from agnitra.cli import main
from agnitra.errors import UserError
from seeded_cache import seeded_cache


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    """Logs, the store and cached ceilings (given, not measured: seconds saved) under tmp_path."""
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    monkeypatch.delenv("AGNITRA_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)


def _cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line(code, err, *fragments):
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err and "internal error" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _factory(tmp_path, source: str, name: str = "m.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


# ---- a model on the meta device -----------------------------------------------------------------

META = """
    import torch

    def alone():
        return torch.nn.Linear(4, 4, device="meta")

    def with_inputs():
        return torch.nn.Linear(4, 4, device="meta"), (torch.randn(2, 4),)
    """
META_FIX = "load real weights first (e.g. `model.to_empty(device=...)` then load a state dict)"


@pytest.mark.parametrize("verb, factory", [("bench", "alone"), ("bench", "with_inputs"), ("profile", "with_inputs"), ("optimize", "with_inputs")])
def test_a_model_on_the_meta_device_is_one_line(verb, factory, tmp_path, capsys):
    path = _factory(tmp_path, META)
    extra = ["--budget", "20s"] if verb == "optimize" else []
    code, _, err = _cli([verb, f"{path}:{factory}", "--device", "cpu", *extra], capsys)
    _one_line(code, err, f"{path}:{factory}: the model's parameters are on the meta device (no values: weight, bias)", META_FIX)


@pytest.mark.parametrize("call", [lambda m, x: agnitra.optimize(m, x, device="cpu", budget="20s"), lambda m, x: agnitra.benchmark(m, x, device="cpu")], ids=["optimize", "benchmark"])
def test_a_model_on_the_meta_device_through_the_sdk(call):
    with pytest.raises(UserError) as info:
        call(torch.nn.Linear(4, 4, device="meta"), (torch.randn(2, 4),))
    assert str(info.value).startswith("the model's parameters are on the meta device") and META_FIX in str(info.value)


# ---- a batch too large for memory ---------------------------------------------------------------

# forward allocates 4 PiB (past any address space: the allocator refuses at once) from batch 64 on:
# at the first call, or (late) only after the first call, inside the measurements
TOO_LARGE = """
    import torch

    class Model(torch.nn.Module):
        def __init__(self, late):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.late, self.calls = late, 0

        def forward(self, x):
            self.calls += 1
            if x.shape[0] >= 64 and self.calls > self.late:
                torch.empty(1 << 50)
            return self.linear(x)

    def first(batch=1):
        return Model(0), (torch.randn(batch, 4),)

    def late(batch=1):
        return Model(1), (torch.randn(batch, 4),)
    """


@pytest.mark.parametrize(
    "verb, factory",
    [("bench", "first"), ("bench", "late"), ("profile", "first"), ("optimize", "first"), ("optimize", "late")],
)
def test_a_batch_too_large_for_memory_is_one_line(verb, factory, tmp_path, capsys):
    path = _factory(tmp_path, TOO_LARGE)
    extra = ["--budget", "20s"] if verb == "optimize" else ["--runs", "2", "--warmup", "1"] if verb == "bench" else []
    code, out, err = _cli([verb, f"{path}:{factory}", "--batch", "64", "--device", "cpu", *extra], capsys)
    _one_line(code, err, "m ran out of memory at batch 64 (it tried to allocate 4.0 PiB; the machine has ", ": pass a smaller --batch")


def test_a_batch_too_large_for_memory_through_the_sdk(tmp_path):
    namespace = {}
    exec(textwrap.dedent(TOO_LARGE), namespace)
    model, inputs = namespace["first"](batch=64)
    with pytest.raises(UserError, match=r"^Model ran out of memory at batch 64 \(.*\): pass example inputs with a smaller batch$"):
        agnitra.benchmark(model, inputs, device="cpu")


# ---- a model path with bytes that are not UTF-8 -------------------------------------------------


def test_a_model_path_with_undecodable_bytes_works(tmp_path):
    """os.fsdecode turns the byte 0xff into a lone surrogate: the log, the report files and the
    store take it (written as \\udcff), and the run ends as any other."""
    import os

    folder = os.fsencode(tmp_path)
    with open(folder + b"/m\xff.py", "w") as f:
        f.write(textwrap.dedent(META).replace('device="meta"', 'device="cpu"'))
    model = os.fsdecode(folder + b"/m\xff.py") + ":with_inputs"
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "agnitra.cli", "bench", model, "--device", "cpu", "--runs", "2", "--warmup", "1", "--no-ops", "--no-check", "--out", str(run)]
    done = subprocess.run([os.fsencode(a) for a in argv], capture_output=True, timeout=120)  # as a shell passes the bytes
    assert done.returncode == 0, done.stderr
    assert b"not recorded" not in done.stdout and b"error" not in done.stderr and b"Traceback" not in done.stderr
    assert "m\\udcff.py:with_inputs" in (run / "agnitra.log").read_text()
    assert json.loads((run / "report.json").read_text())["workload"]["source"] == model
    assert (run / "report.html").read_text().endswith("</html>\n")  # whole, and UTF-8


# ---- the measurement store ------------------------------------------------------------------------

BENCH_QUICK = ["--device", "cpu", "--runs", "2", "--warmup", "1", "--no-ops", "--no-check"]


def test_no_store_runs_without_the_store_the_user_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGNITRA_DB_URL", "notaurl")
    path = _factory(tmp_path, META.replace('device="meta"', 'device="cpu"'))
    code, out, err = _cli(["bench", f"{path}:with_inputs", *BENCH_QUICK, "--no-store"], capsys)
    assert code == 0 and "store" not in out, err
    assert not (tmp_path / "cache" / "agnitra.db").exists()
    report = agnitra.benchmark(torch.nn.Linear(4, 4), (torch.randn(2, 4),), device="cpu", runs=2, warmup=1, check=False, op_breakdown=False, store=False)
    assert not any("store" in note for note in report.notes)


def test_a_damaged_default_store_is_a_note_naming_the_file_and_the_fix(tmp_path, capsys):
    store = tmp_path / "cache" / "agnitra.db"
    store.write_bytes(b"\x00garbage, not SQLite" * 100)
    path = _factory(tmp_path, META.replace('device="meta"', 'device="cpu"'))
    code, out, err = _cli(["bench", f"{path}:with_inputs", *BENCH_QUICK], capsys)
    assert code == 0, err
    said = " ".join(out.split())
    assert f"note: store: this run was not recorded: the default store {store} is damaged (" in said
    assert "): move it away (a new one is created) or pass --no-store" in said and "AGNITRA_DB_URL" not in said


# ---- a model handed over in training mode ----------------------------------------------------------

TRAINING_NOTE = "the model was in training mode; it was measured and optimized in eval mode (dropout off, batch norms on their running statistics): the answer is an eval-mode model"


def _training_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(8)).train()


def test_a_model_in_training_mode_is_optimized_in_eval_mode_and_said():
    model = _training_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.warns(UserWarning, match=r"^the model was in training mode; it was measured and optimized in eval mode") as caught:
        optimized = agnitra.optimize(model, (torch.randn(4, 8),), device="cpu", transforms=["threads"], peers=[], budget="30s")
    assert [str(w.message) for w in caught if "training mode" in str(w.message)] == [TRAINING_NOTE]
    assert optimized.report.bench.notes[0] == TRAINING_NOTE
    assert optimized.report.bench.variants[0].status == "ok" and optimized.report.bench.variants[0].correctness.passed  # eval mode: repeatable
    assert all(m.training for m in model.modules())  # the user's object: still in training mode, its running statistics untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_model_in_training_mode_is_benchmarked_in_eval_mode_and_said():
    model = _training_model()
    with pytest.warns(UserWarning, match="the model was in training mode; it was measured in eval mode"):
        report = agnitra.benchmark(model, (torch.randn(4, 8),), device="cpu", runs=2, warmup=1, op_breakdown=False, store=False)
    assert report.notes[0].startswith("the model was in training mode; it was measured in eval mode (dropout off, batch norms on their running statistics)")
    assert report.variants[0].correctness.passed and all(m.training for m in model.modules())


def test_a_model_in_eval_mode_or_without_mode_dependent_layers_gets_no_note(recwarn):
    report = agnitra.benchmark(torch.nn.Linear(4, 4), (torch.randn(2, 4),), device="cpu", runs=2, warmup=1, op_breakdown=False, store=False)  # training, but nothing depends on it
    report_eval = agnitra.benchmark(_training_model().eval(), (torch.randn(4, 8),), device="cpu", runs=2, warmup=1, op_breakdown=False, store=False)
    assert not any("training mode" in n for n in report.notes + report_eval.notes)
    assert not any("training mode" in str(w.message) for w in recwarn)

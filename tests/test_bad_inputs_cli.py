"""Bad input through the CLI and the SDK: exit 2 (130/143 for signals), exactly one line on stderr
naming the problem and the fix, no traceback; `--json` leaves stdout one JSON document whatever
the model prints.

In-process cases run `agnitra.cli.main(argv)` with `prepare_workload` replaced by a function that
fails the test: a flag must be refused before any model is built. Signals and descriptor-level
output run the CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import agnitra
from agnitra import api
from agnitra.cli import main
from agnitra.errors import UserError
from seeded_cache import seeded_cache

TINY = ["zoo:tinylm", "--size", "tiny", "--device", "cpu"]


@pytest.fixture(autouse=True)
def nothing_is_built(monkeypatch, tmp_path):
    """Fails a test that builds a model; logs and default run folders under tmp_path."""

    def built(*args, **kwargs):
        raise AssertionError("a model was built before the arguments were checked")

    monkeypatch.setattr(api, "prepare_workload", built)
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def _cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_error(code, out, err, *fragments, exit_code=2):
    lines = err.strip().splitlines()
    assert code == exit_code, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err and "internal error" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert out == ""


# ---- usage errors: click's, through whichever click the installed typer uses -----------------


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["optimize", "--foo", *TINY], ["no such option", "--foo", "see `agnitra optimize --help`"]),
        (["nosuch"], ["no such command 'nosuch'", "see `agnitra --help`"]),
        (["bench"], ["missing argument", "see `agnitra bench --help`"]),
        (["bench", *TINY, "--batch", "abc"], ["'--batch'", "see `agnitra bench --help`"]),
        (["profile", *TINY, "--runs", "many"], ["'--runs'", "see `agnitra profile --help`"]),
        (["optimize", *TINY, "--min-cosine", "high"], ["'--min-cosine'", "see `agnitra optimize --help`"]),
        (["zoo", "lst"], ["no such command 'lst'", "see `agnitra zoo --help`"]),
    ],
    ids=["unknown-flag", "unknown-command", "missing-argument", "batch-abc", "runs-word", "min-cosine-word", "unknown-subcommand"],
)
def test_usage_errors_are_one_line_with_exit_2(argv, fragments, capsys):
    _assert_one_line_error(*_cli(argv, capsys), *fragments)


def test_help_still_works(capsys):
    code, out, err = _cli(["optimize", "--help"], capsys)
    assert code == 0 and "--budget" in out and "--allow-pickle" in out and err == ""
    code, out, _ = _cli([], capsys)  # `agnitra` alone: its help
    assert code == 0 and "optimize" in out


# ---- every flag checked up front, with the accepted values -------------------------------------


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["bench", *TINY, "--batch", "0"], ["--batch must be a whole number >= 1, got 0"]),
        (["bench", *TINY, "--seq-len", "-3"], ["--seq-len must be a whole number >= 1"]),
        (["bench", *TINY, "--tokens", "0"], ["--tokens must be a whole number >= 1"]),
        (["bench", *TINY, "--runs", "0"], ["--runs must be a whole number >= 1"]),
        (["bench", *TINY, "--warmup", "-1"], ["--warmup must be a whole number >= 0"]),
        (["bench", *TINY, "--top-k", "0"], ["--top-k must be a whole number >= 1"]),
        (["bench", *TINY, "--temperature", "-0.5"], ["--temperature must be a number >= 0"]),
        (["optimize", *TINY, "--budget", "-1"], ["--budget must be a positive duration", "90s, 10m or 1h"]),
        (["optimize", *TINY, "--budget", "0"], ["--budget must be a positive duration"]),
        (["optimize", *TINY, "--budget", "soon"], ["--budget must be a positive duration"]),
        (["optimize", *TINY, "--candidate-timeout", "0s"], ["--candidate-timeout must be a positive duration"]),
        (["optimize", *TINY, "--min-cosine", "2"], ["--min-cosine must be a number in (0, 1]"]),
        (["optimize", *TINY, "--min-cosine", "0"], ["--min-cosine must be a number in (0, 1]"]),
        (["optimize", *TINY, "--min-token-agreement", "1.5"], ["--min-token-agreement must be a number in (0, 1]"]),
        (["optimize", *TINY, "--max-error", "0"], ["--max-error must be a number > 0"]),
        (["optimize", *TINY, "--check-positions", "0"], ["--check-positions must be a whole number >= 1"]),
        (["optimize", *TINY, "--objective", "fast"], ["--objective: unknown objective 'fast'", "latency, throughput, memory, energy"]),
        (["optimize", *TINY, "--peers", "compile,warp"], ["--peers: unknown variant 'warp'", "onnxruntime-int8"]),
        (["bench", "zoo:tinylm", "--device", "tpu"], ["--device: unknown device 'tpu'", "cpu, cuda, auto"]),
        (["bench", *TINY, "--dtype", "fp8"], ["--dtype: unknown dtype 'fp8'", "bf16"]),
        (["bench", *TINY, "--variants", "eager,turbo"], ["--variants: unknown variant 'turbo'", "compile-max-autotune"]),
        (["bench", *TINY, "--variants", ","], ["no variants given"]),
        (["bench", *TINY, "--task", "vision"], ["--task: unknown task 'vision'", "classifier"]),
        (["bench", "zoo:tinylm", "--size", "huge"], ["--size: unknown size 'huge'", "full, tiny"]),
        (["bench", "model.pt", "--input-shape", "1,128"], ["bad --input-shape '1,128'", "1x3x224x224"]),
        (["inspect", *TINY, "--limit", "0"], ["--limit must be a whole number >= 1"]),
        (["profile", *TINY, "--warmup", "-2"], ["--warmup must be a whole number >= 0"]),
        (["tune-matmul", "--dim", "0"], ["--dim/--shape must be a whole number >= 1"]),
        (["tune-matmul", "--shape", "1,2"], ["bad --shape '1,2'", "M,N,K"]),
        (["tune-matmul", "--dim", "64", "--max-trials", "0"], ["--max-trials must be a whole number >= 1"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0] in ("bench", "optimize", "inspect", "profile", "tune-matmul") else None,
)
def test_out_of_range_flags_are_refused_before_any_work(argv, fragments, capsys):
    _assert_one_line_error(*_cli(argv, capsys), *fragments)


@pytest.mark.parametrize("verb", ["profile", "inspect", "bench", "optimize"])
def test_allow_pickle_reaches_the_loader_only_when_given(verb, monkeypatch, capsys):
    seen = []

    def recorded(model, example_inputs=None, **options):
        seen.append(options.get("allow_pickle", False))
        raise UserError("stop here")

    monkeypatch.setattr(api, "prepare_workload", recorded)
    for flags in (["--allow-pickle"], []):
        _assert_one_line_error(*_cli([verb, "model.pt2", "--device", "cpu", *flags], capsys), "stop here")
    assert seen == [True, False]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m, x: agnitra.optimize(m, x, device="cpu", budget="-1"), "--budget must be a positive duration"),
        (lambda m, x: agnitra.optimize(m, x, device="cpu", budget=0), "--budget must be a positive duration"),
        (lambda m, x: agnitra.optimize(m, x, device="cpu", min_cosine=2.0), "--min-cosine must be a number in (0, 1]"),
        (lambda m, x: agnitra.benchmark(m, x, device="cpu", runs=0), "--runs must be a whole number >= 1"),
        (lambda m, x: agnitra.profile(m, x, device="cpu", bach=2), "unknown option(s) bach"),
        (lambda m, x: agnitra.inspect(m, x, device="gpu"), "--device: unknown device 'gpu'"),
    ],
    ids=["budget-minus-one", "budget-zero", "min-cosine-2", "runs-0", "unknown-keyword", "device-gpu"],
)
def test_the_sdk_checks_the_same(call, message):
    with pytest.raises(UserError) as info:
        call(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    assert message in str(info.value)


# ---- Ctrl-C and SIGTERM ------------------------------------------------------------------------


def _agnitra(args, cache: Path) -> subprocess.Popen:
    # PYTHONFAULTHANDLER: a command that outlives its signal is sent SIGABRT, which prints where it was
    env = {**os.environ, "AGNITRA_CACHE_DIR": str(seeded_cache(cache)), "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([sys.executable, "-m", "agnitra.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    """Until the command has started its work (it writes the log's header line first)."""
    deadline = time.monotonic() + 120
    while not (path.is_file() and path.stat().st_size > 0) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    assert path.is_file(), f"no {path.name} after 120 s"
    time.sleep(1.0)  # inside the work by now


def _ended(proc: subprocess.Popen) -> tuple[str, str]:
    """Its output once it has exited; one still running after 60 s fails the test with its stacks."""
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        pytest.fail(f"still running 60 s after the signal; its stacks:\n{proc.communicate()[1][-6000:]}")


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_bench_ends_in_one_line(signum, exit_code, tmp_path):
    proc = _agnitra(["bench", *TINY, "--runs", "100000", "--no-check", "--no-ops"], tmp_path)
    _wait_for(tmp_path / "logs" / "last.log", proc)
    proc.send_signal(signum)
    out, err = _ended(proc)
    assert proc.returncode == exit_code, err
    assert err.strip() == "interrupted" and out == ""


def test_sigint_during_optimize_names_the_run_folder_and_resume(tmp_path):
    run = tmp_path / "run"
    proc = _agnitra(["optimize", *TINY, "--budget", "5m", "--out", str(run)], tmp_path)
    _wait_for(run / "agnitra.log", proc)
    proc.send_signal(signal.SIGINT)
    out, err = _ended(proc)
    assert proc.returncode == 130, err
    assert err.strip() == f"interrupted; the best verified recipe so far and the partial results are in {run}; resume with --resume" and out == ""


def test_a_signal_that_lands_in_a_finalizer_still_interrupts():
    """Python only prints an exception raised in a __del__: the signal is sent again and stops the block."""
    from agnitra.cli import Interrupted, _signals_interrupt

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            spin_until = time.monotonic() + 0.2
            while time.monotonic() < spin_until:  # the handler runs here, inside __del__
                pass

    with pytest.raises(Interrupted), _signals_interrupt():
        doomed = SignalledWhileCollected()
        del doomed
        spin_until = time.monotonic() + 5
        while time.monotonic() < spin_until:
            pass


def test_the_handler_acts_only_in_the_process_that_installed_it():
    """A child forked while the handler is installed dies of SIGTERM as by default."""
    from agnitra.cli import _signals_interrupt

    with _signals_interrupt():
        pid = os.fork()
        if pid == 0:  # the child: killed by the signal, or exit 7 if the handler raised instead
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
            finally:
                os._exit(7)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


# ---- output: one JSON document, library prints in the log, whole tables off a terminal -----------

NOISY_MODEL = textwrap.dedent(
    """
    import logging
    import os
    import warnings

    import torch

    class Noisy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x):
            print("python print from forward")
            os.write(1, b"fd-1 write from forward\\n")
            os.write(2, b"fd-2 write from forward\\n")
            return self.linear(x)

    def make():
        print("python print from the factory")
        warnings.warn("a library warning")
        logging.getLogger("transformers.noisy").warning("a library log record")
        return Noisy(), (torch.randn(3, 4),)
    """
)


def _bench_noisy(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, str, str]:
    (tmp_path / "noisy.py").write_text(NOISY_MODEL)
    proc = _agnitra(["bench", f"{tmp_path}/noisy.py:make", "--device", "cpu", "--runs", "2", "--warmup", "1", "--no-ops", "--json", *extra], tmp_path)
    out, err = proc.communicate(timeout=120)
    return proc, out, err


def test_json_is_one_document_while_the_model_prints(tmp_path):
    proc, out, err = _bench_noisy(tmp_path)
    assert proc.returncode == 0, err
    assert json.loads(out)["schema"] == "agnitra.bench/1"  # nothing before or after the document
    assert err == ""  # no print, warning or log record of the model's on the terminal either
    log = (tmp_path / "logs" / "last.log").read_text()
    for line in ("python print from forward", "fd-1 write from forward", "fd-2 write from forward", "python print from the factory", "a library warning", "a library log record"):
        assert line in log


def test_verbose_shows_library_output_on_stderr_and_out_keeps_the_log(tmp_path):
    run = tmp_path / "run"
    proc, out, err = _bench_noisy(tmp_path, "--verbose", "--out", str(run))
    assert proc.returncode == 0, err
    assert json.loads(out)["schema"] == "agnitra.bench/1"
    assert "fd-1 write from forward" in err and "python print from forward" in err
    assert "fd-2 write from forward" in (run / "agnitra.log").read_text()


def test_tables_off_a_terminal_are_whole_tab_separated_rows(capsys):
    from agnitra.workloads.registry import zoo_entries

    code, out, _ = _cli(["zoo", "list"], capsys)
    assert code == 0
    rows = out.splitlines()
    assert rows[0] == "# Agnitra workload zoo" and rows[1] == "name\ttask\tparams\tdescription"
    for entry in zoo_entries():  # every description whole, however long
        assert f"zoo:{entry.name}\t{entry.task.value}\t" in out and f"\t{' '.join(entry.description.split())}\n" in out + "\n"
    assert all(len(row.split("\t")) == 4 for row in rows[1:])


def test_on_a_terminal_tables_are_drawn_and_library_prints_stay_in_the_log(tmp_path):
    """Under a pseudo-terminal the progress bar runs, and Rich does not route the model's prints around it."""
    import pty

    (tmp_path / "noisy.py").write_text(NOISY_MODEL)
    primary, secondary = pty.openpty()
    env = {**os.environ, "AGNITRA_CACHE_DIR": str(seeded_cache(tmp_path))}
    args = ["bench", f"{tmp_path}/noisy.py:make", "--device", "cpu", "--runs", "2", "--warmup", "1", "--no-ops"]
    proc = subprocess.Popen([sys.executable, "-m", "agnitra.cli", *args], stdin=secondary, stdout=secondary, stderr=secondary, env=env)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert proc.wait(timeout=120) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "┃" in screen and "eager" in screen  # a drawn table, not tab-separated rows
    assert "from forward" not in screen and "a library warning" not in screen
    assert "python print from forward" in (tmp_path / "logs" / "last.log").read_text()


def test_a_signal_inside_an_import_is_an_interruption_not_an_internal_error():
    """Ctrl-C landing in a class body's __set_name__ during a lazy import reaches the CLI as a
    RuntimeError raised from it: still 'interrupted', exit 130/143."""
    from agnitra.cli import Interrupted, interruption_in

    class Field:
        def __set_name__(self, owner, name):
            raise Interrupted(signal.SIGTERM)

    with pytest.raises(BaseException) as info:
        type("LocalState", (), {"automatic_dynamic": Field()})
    assert interruption_in(info.value) == 143
    wrapped = RuntimeError("Error calling __set_name__")
    wrapped.__cause__ = KeyboardInterrupt()
    assert interruption_in(wrapped) == 130 and interruption_in(ValueError("plain")) is None


# ---- agnitra.toml with a value of the wrong type -------------------------------------------------


@pytest.mark.parametrize(
    "toml, fragments",
    [
        ("device = 3\n", ["agnitra.toml: `device` must be a string (cpu, cuda or auto), got 3", 'device = "cpu"']),
        ("cache_dir = []\n", ["agnitra.toml: `cache_dir` must be a string (a folder), got []"]),
        ("[agnitra]\ndb_url = 5\n", ["agnitra.toml: `db_url` must be a string (a database URL), got 5"]),
        ("device = true\n", ["`device` must be a string (cpu, cuda or auto), got true"]),
        ("agnitra = 3\n", ["`agnitra` must be a table"]),
    ],
    ids=["device-3", "cache-dir-list", "db-url-5", "device-true", "agnitra-3"],
)
def test_a_setting_of_the_wrong_type_in_agnitra_toml_is_one_line(toml, fragments, tmp_path, capsys):
    (tmp_path / "agnitra.toml").write_text(toml)
    _assert_one_line_error(*_cli(["bench", "zoo:tinylm", "--size", "tiny"], capsys), *fragments)


# ---- damaged cache files: set aside as <name>.corrupt, measured again, said so ---------------------

DAMAGED_CACHE = {
    "garbage": b"\xff\xfe\x00\x81garbage",
    "truncated": b'{"version": 2, "copy_gbps": 10.1, "matmul_tfl',
    "list": b"[1, 2, 3]",
    "wrong-fields": b'{"version": 2, "copy_gbps": "fast", "matmul_tflops": [1, 2]}',
}


@pytest.mark.parametrize("damage", DAMAGED_CACHE, ids=list(DAMAGED_CACHE))
def test_a_damaged_ceilings_file_is_set_aside_and_measured_again(damage, tmp_path, monkeypatch, capsys):
    from agnitra.telemetry import ceilings
    from agnitra.telemetry.signature import device_signature

    measured = {"version": ceilings.CEILINGS_VERSION, "copy_gbps": 12.5, "matmul_tflops": {"float32": 0.1}}
    monkeypatch.setattr(ceilings, "measure_ceilings", lambda device: measured)
    path = ceilings.ceilings_path(tmp_path / "cache", device_signature(torch.device("cpu")))
    path.parent.mkdir(parents=True)
    path.write_bytes(DAMAGED_CACHE[damage])
    code, out, err = _cli(["device", "--device", "cpu"], capsys)
    assert code == 0 and err == "", err
    said = " ".join(out.split())
    assert "ceilings (measured now): copy 12.5 GB/s" in said
    assert f"note: the cached ceilings {path} were damaged (" in said and f"set aside as {path.name}.corrupt and measured again" in said
    assert path.with_name(path.name + ".corrupt").read_bytes() == DAMAGED_CACHE[damage]
    assert json.loads(path.read_text())["copy_gbps"] == 12.5
    code, out, _ = _cli(["device", "--device", "cpu"], capsys)  # the next run reads the new file, no note
    assert code == 0 and "ceilings (cached)" in out and "note:" not in out


@pytest.mark.parametrize("damage", DAMAGED_CACHE, ids=list(DAMAGED_CACHE))
def test_a_damaged_tuning_cache_is_set_aside_and_tuned_again(damage, tmp_path):
    from agnitra.kernels.tuning_cache import TuningCache

    cache = TuningCache(tmp_path, "sig")
    cache.path.parent.mkdir(parents=True)
    cache.path.write_bytes(DAMAGED_CACHE[damage].replace(b'"version": 2', b'"version": 1'))
    with pytest.warns(UserWarning, match="was damaged"):
        assert cache.get("k") is None  # its kernels tuned again
    assert len(cache.notes) == 1 and f"the tuning cache {cache.path} was damaged (" in cache.notes[0] and f"set aside as {cache.path.name}.corrupt" in cache.notes[0]
    assert cache.path.with_name(cache.path.name + ".corrupt").is_file() and not cache.path.exists()
    cache.put("k", {"config": {"BLOCK": 1}, "ms": 1.0})
    assert TuningCache(tmp_path, "sig").get("k")["config"] == {"BLOCK": 1}


# ---- --out naming a file -------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["bench", "optimize", "profile", "inspect"])
@pytest.mark.parametrize("under", [False, True], ids=["the-file", "under-the-file"])
def test_out_naming_a_file_is_refused_before_any_work(verb, under, tmp_path, capsys):
    (tmp_path / "afile").write_text("mine\n")
    out = tmp_path / "afile" / "run" if under else tmp_path / "afile"
    expected = f"--out {out} is inside {tmp_path / 'afile'}, a file, not a folder" if under else f"--out {out} is a file, not a folder"
    _assert_one_line_error(*_cli([verb, *TINY, "--out", str(out)], capsys), expected, "name a folder (it is created)")
    assert (tmp_path / "afile").read_text() == "mine\n"


# ---- the measurement store: a store the user named must open; the default one's damage is a note --------

BAD_STORES = {
    "unreachable": ("postgresql://nobody:s3cret@127.0.0.1:1/x", "postgresql://nobody@127.0.0.1:1/x"),
    "unparsable": ("notaurl", "notaurl"),
    "garbage-file": ("sqlite:///{tmp}/x.db", "sqlite:///{tmp}/x.db"),
}


@pytest.mark.parametrize("verb", ["bench", "optimize"])
@pytest.mark.parametrize("store", BAD_STORES, ids=list(BAD_STORES))
def test_a_named_store_that_cannot_be_opened_ends_the_run_before_any_work(verb, store, tmp_path, monkeypatch, capsys):
    url, shown = (text.format(tmp=tmp_path) for text in BAD_STORES[store])
    (tmp_path / "x.db").write_bytes(b"\x00garbage, not SQLite" * 100)
    monkeypatch.setenv("AGNITRA_DB_URL", url)
    code, out, err = _cli([verb, *TINY], capsys)
    _assert_one_line_error(code, out, err, f"the measurement store at {shown} cannot be opened (", "): fix AGNITRA_DB_URL or pass --no-store")
    assert "s3cret" not in err


def test_a_store_named_in_agnitra_toml_names_its_setting(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("AGNITRA_DB_URL", raising=False)  # conftest names a store for every test
    (tmp_path / "agnitra.toml").write_text('db_url = "notaurl"\n')
    _assert_one_line_error(*_cli(["bench", *TINY], capsys), "the measurement store at notaurl cannot be opened", "fix `db_url` in agnitra.toml or pass --no-store")


def test_store_info_on_a_damaged_default_store_names_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("AGNITRA_DB_URL", raising=False)
    path = tmp_path / "cache" / "agnitra.db"
    path.parent.mkdir()
    path.write_bytes(b"\x00garbage, not SQLite" * 100)
    code, out, err = _cli(["store", "info"], capsys)
    _assert_one_line_error(code, out, err, f"the default store {path} is damaged (", "): move it away (a new one is created)")
    assert "AGNITRA_DB_URL" not in err and "--no-store" not in err


@pytest.mark.parametrize("verb", ["bench", "optimize"])
def test_no_store_is_a_flag_of_bench_and_optimize(verb, capsys):
    code, out, _ = _cli([verb, "--help"], capsys)
    assert code == 0 and "--no-store" in out

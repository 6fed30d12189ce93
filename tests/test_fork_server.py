"""CPU workers forked from a fork server (`bench.fork_server`): they start with this process's
environment, working directory and output as they are when each starts, a user's script is not
run again in them, and AGNITRA_WORKER_FORK=0 starts fresh interpreters instead."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from torch import nn

from agnitra.bench.isolated import Worker, WorkloadSource, workload_source
from agnitra.workloads.base import TaskKind, Workload
from seeded_cache import seeded_cache


def _source() -> WorkloadSource:
    model = nn.Sequential(nn.Linear(4, 4)).eval()
    workload = Workload("w", model, (torch.randn(2, 4),), TaskKind.GENERIC, batch=2)
    source, why = workload_source(model, {}, workload, torch.device("cpu"))
    assert source is not None, why
    return source


def _seen(workload, device, progress=None):
    return os.environ.get("AGNITRA_TEST_MARK"), os.getcwd(), os.getpgrp() == os.getpid(), os.getppid()


def test_a_forked_worker_takes_the_environment_and_folder_of_its_start(tmp_path, monkeypatch):
    with Worker(_source()) as first:
        assert first.call(_seen, timeout=120)[0] is None
    monkeypatch.setenv("AGNITRA_TEST_MARK", "set later")
    monkeypatch.chdir(tmp_path)
    with Worker(_source()) as worker:
        mark, cwd, own_group, parent = worker.call(_seen, timeout=120)
        assert (mark, cwd, own_group) == ("set later", str(tmp_path), True)
        assert parent != os.getpid()  # forked by the server, not started by this process
        pid = worker.process.pid
    assert worker.process is None
    assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def test_worker_fork_0_starts_a_fresh_interpreter_of_this_process(monkeypatch):
    monkeypatch.setenv("AGNITRA_WORKER_FORK", "0")
    with Worker(_source()) as worker:
        parent = worker.call(_seen, timeout=120)[3]
    assert parent == os.getpid()  # started by this process, not forked by the server


def test_a_users_script_is_not_run_again_in_its_workers(tmp_path):
    """multiprocessing would run a forked child's main script again; a fresh interpreter
    (AGNITRA_WORKER_FORK=0, the test above) runs only the worker's own code."""
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent("""
        import torch, agnitra
        print("script ran", flush=True)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8)).eval()
        fast = agnitra.optimize(model, (torch.randn(2, 8),), device="cpu", transforms=["threads"], peers=[], budget="60s", out="run", store=False)
        print("starts", fast.report.search["worker_starts"], flush=True)
        from multiprocessing import forkserver
        server = open(f"/proc/{forkserver._forkserver._forkserver_pid}/cmdline").read()
        print("server forked from this process:", server == open("/proc/self/cmdline").read(), flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ, AGNITRA_WORKER_FORK="1", AGNITRA_CACHE_DIR=str(seeded_cache(tmp_path / "cache"))),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("script ran") == 1 and "starts 1" in done.stdout, done.stdout
    # no parallel region ran before the run (a Linear of 8 x 8): the server is a fork of the script's process
    assert "server forked from this process: True" in done.stdout, done.stdout


def _threads_parallel_region(workload, device, progress=None):
    torch.set_num_threads(2)
    return float(torch.ones(1 << 17).add_(1).sum())


def test_after_a_parallel_region_the_server_is_a_fresh_interpreter_and_its_workers_run_threads(tmp_path):
    """GNU OpenMP hangs in a child forked after its parent ran a parallel region: the server's
    probe finds it and the server becomes a fresh interpreter, whose workers run threads."""
    script = tmp_path / "threaded.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, sys.argv[1])
        from test_fork_server import _source, _threads_parallel_region
        from agnitra.bench.isolated import Worker
        torch.set_num_threads(2)
        torch.ones(1 << 17).add_(1)  # OpenMP's team started in this process
        with Worker(_source()) as worker:
            print("sum", worker.call(_threads_parallel_region, timeout=120), flush=True)
        from multiprocessing import forkserver
        print("server:", open(f"/proc/{forkserver._forkserver._forkserver_pid}/cmdline").read().replace(chr(0), " "), flush=True)
    """))
    done = subprocess.run([sys.executable, str(script), str(Path(__file__).parent)], cwd=tmp_path, env=dict(os.environ, AGNITRA_WORKER_FORK="1"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"sum {float(2 * (1 << 17))}" in done.stdout, done.stdout
    assert "from multiprocessing.forkserver import main" in done.stdout, done.stdout


def test_a_forked_child_forks_its_workers_from_its_parents_server():
    """A service job is forked from its worker: its workers come from the worker's server, whose
    life it checks without waitpid (which only the server's parent may call)."""
    from multiprocessing import forkserver

    from agnitra.bench import fork_server

    fork_server.warm("cpu")
    parent_server = forkserver._forkserver._forkserver_pid
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its worker's parent, and the server it would use
        try:
            with Worker(_source()) as worker:
                parent_of_worker = worker.call(_seen, timeout=120)[3]
            os.write(write_end, f"{parent_of_worker} {forkserver._forkserver._forkserver_pid}".encode())
        except BaseException as exc:  # noqa: BLE001 - said to the parent, which fails the test with it
            os.write(write_end, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as said:
        seen = said.read()
    os.waitpid(pid, 0)
    assert seen == f"{parent_server} {parent_server}", (seen, parent_server)


def test_a_service_worker_imports_what_warming_needs_before_it_claims_a_job():
    """A service worker warms the fork server after it claims a job and before its lease is first
    renewed: the warming must import nothing of torch then (the imports took seconds under load,
    past a short lease, and the job was queued again)."""
    script = textwrap.dedent(
        """
        import sys
        from agnitra.service.executor import LocalExecutor, _warm_fork_server
        LocalExecutor()
        before = set(sys.modules)
        _warm_fork_server("cpu")
        print(sorted(m for m in set(sys.modules) - before if m == "torch" or m.startswith("torch.")))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_a_start_past_its_limit_says_the_limit_it_had_not_what_was_left_after_the_fork(monkeypatch):
    """Forking under load can take seconds of a start's limit: the error names the limit given."""
    import pytest

    from agnitra.bench import fork_server
    from agnitra.bench.isolated import WorkerTimeout

    real_start = fork_server.start

    def slow_start(conn):
        import time

        time.sleep(1.5)
        return real_start(conn)

    monkeypatch.setattr(fork_server, "start", slow_start)
    monkeypatch.setenv("AGNITRA_WORKER_FORK", "1")
    with Worker(_source()) as worker, pytest.raises(WorkerTimeout, match=r"^ran past its time limit of 1 s \(starting the worker \(loading the model\)\); stopped$"):
        worker.ensure_started(1.0)

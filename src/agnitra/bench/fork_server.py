"""CPU workers forked from a process that has already imported torch and Agnitra (a
multiprocessing fork server), so that starting one takes a fraction of a second instead of a
fresh interpreter's imports (about 10 s on a 2-core machine). The server is started on the first
CPU worker and lives as long as this process. CUDA workloads keep a fresh interpreter: a forked
process must not share a CUDA driver's state. AGNITRA_WORKER_FORK=0 turns forking off.

The forked worker takes this process's environment, working directory and standard output and
error as they are when it starts, not as they were when the server started."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.process
import os
import subprocess
import sys
from multiprocessing import spawn
from multiprocessing.connection import Connection

# imported once in the server (what a worker imports while it starts, `isolated._warm_imports`);
# Dynamo's and Inductor's configs read TORCH* variables as they are when the server starts
# (and agnitra.search.optimize, whose functions are the calls a search sends: 0.6 s a worker otherwise)
PRELOAD = ["agnitra.bench.isolated", "agnitra.bench.harness", "agnitra.bench.variants", "agnitra.transforms", "torch._dynamo", "torch._inductor.compile_fx", "scipy.stats",
           "agnitra.search.optimize", "agnitra.bench.frozen_heap"]
_context = None


def usable(device: str) -> bool:
    from agnitra.config import worker_fork_enabled

    return device == "cpu" and sys.platform.startswith("linux") and worker_fork_enabled()


class ForkedProcess:
    """subprocess.Popen's face (pid, poll, wait) over a process the fork server started."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        self.pid = process.pid

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired("agnitra worker", timeout)
        return self._process.exitcode


def _forkserver_context():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _share_with_forked_children() -> None:
    """After a fork (a service job forked from its worker): the parent's server, whose socket and
    'alive' pipe the child inherits, serves the child too, instead of a new server's imports (~9 s
    of CPU). multiprocessing checks a server's life with waitpid, which only its parent may call:
    the child asks the kernel instead, and starts a server of its own only once that one is gone."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = server._forkserver_pid
    if pid is None:
        return

    def ensure_running() -> None:
        if server._forkserver_pid == pid and _alive(pid):
            return
        if server._forkserver_pid == pid:  # the parent's server is gone: this process starts its own
            os.close(server._forkserver_alive_fd)
            server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
        type(server).ensure_running(server)

    server.ensure_running = ensure_running


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_share_with_forked_children)


def warm(device: str) -> None:
    """Start the server now, where CPU workers will be forked: its imports (about 10 s on two
    cores) run while this process captures the graph, instead of after it."""
    if usable(device):
        from multiprocessing import forkserver

        _forkserver_context()
        with _main_left_alone():
            forkserver._forkserver.ensure_running()  # the instance's: a forked child's is replaced below


def start(conn: Connection) -> ForkedProcess:
    """A worker serving `conn`, forked from the server (started now if it is not up)."""
    context = _forkserver_context()
    stdio = (Connection(os.dup(1)), Connection(os.dup(2)))
    try:
        process = context.Process(target=_forked_main, args=(conn, stdio, dict(os.environ), os.getcwd()), name="agnitra-worker")
        with _main_left_alone():
            process.start()
    finally:
        for end in stdio:
            end.close()
    # the Worker owns its lifetime (killed with its process group): multiprocessing must not
    # join it when this process exits
    multiprocessing.process._children.discard(process)
    return ForkedProcess(process)


@contextlib.contextmanager
def _main_left_alone():
    """multiprocessing prepares a child by running this process's main script again (guarded by
    `if __name__ == "__main__"` in its own programs, not in a user's): the worker needs none of it."""
    real = spawn.get_preparation_data

    def without_main(name):
        data = real(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    spawn.get_preparation_data = without_main
    try:
        yield
    finally:
        spawn.get_preparation_data = real


def _forked_main(conn: Connection, stdio: tuple[Connection, Connection], environ: dict[str, str], cwd: str) -> None:
    os.setsid()  # its own process group, killed whole, away from the terminal's Ctrl-C
    for fd, end in zip((1, 2), stdio):
        os.dup2(end.fileno(), fd)
        end.close()
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    from agnitra.bench.isolated import serve

    serve(conn)

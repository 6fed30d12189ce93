"""CPU workers forked from a process that has already imported torch and Agnitra (a
multiprocessing fork server), so that starting one takes a fraction of a second instead of a
fresh interpreter's imports (about 10 s on a 2-core machine). The server is started on the first
CPU worker and lives as long as this process. CUDA workloads keep a fresh interpreter: a forked
process must not share a CUDA driver's state. AGNITRA_WORKER_FORK=0 turns forking off.

The server itself is a fork of this process, which has imported torch and Agnitra already (a
fresh interpreter's imports cost ~9 s of CPU a server), where this process runs one Python thread
and OpenMP's threads survive the fork (GNU OpenMP hangs in a forked child once its parent ran a
parallel region): a probe forked from the new server says which, and where they would not, the
server becomes a fresh interpreter (exec) on the same socket and pipe.

The forked worker takes this process's environment, working directory and standard output and
error as they are when it starts, not as they were when the server started."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.process
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
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


PROBE_TIMEOUT_S = 2.0  # a healthy probe takes milliseconds; a hung one never ends


def _forkserver_context():
    global _context
    if _context is None:
        from multiprocessing import forkserver

        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
        server = forkserver._forkserver
        server.ensure_running = lambda: _ensure_forked_server(server)
    return _context


def _ensure_forked_server(server) -> None:
    """multiprocessing's ForkServer.ensure_running, with the server forked from this process
    where no other Python thread runs (one could hold a lock the fork would keep held)."""
    from multiprocessing import connection, resource_tracker

    if threading.active_count() > 1:
        type(server).ensure_running(server)  # a fresh interpreter's server
        return
    with server._lock:
        resource_tracker.ensure_running()
        if server._forkserver_pid is not None:
            pid, _ = os.waitpid(server._forkserver_pid, os.WNOHANG)
            if not pid:
                return
            os.close(server._forkserver_alive_fd)
            server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            os.chmod(address, 0o600)
            listener.listen()
            # every client holds the write end of the 'alive' pipe: the server ends at its EOF
            alive_r, alive_w = os.pipe()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12's warning on forking a threaded process: the probe answers it
                pid = os.fork()
            if pid == 0:
                _serve_as_forked_server(listener.fileno(), alive_r, alive_w)
            os.close(alive_r)
        server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid


def _serve_as_forked_server(listener_fd: int, alive_r: int, alive_w: int) -> None:
    """The new server's life (never returns): this process's signal handlers undone, then
    multiprocessing's server loop here if a forked child can run OpenMP's threads, else a fresh
    interpreter's on the same socket and pipe."""
    from multiprocessing import forkserver

    code = 1
    try:
        os.close(alive_w)
        forkserver._forkserver._lock = threading.Lock()  # held by the fork's caller
        _default_signal_handlers()
        if _threads_survive_fork():
            _preload_while_needed(alive_r)
            forkserver.main(listener_fd, alive_r, [])
        else:
            _exec_fresh_server(listener_fd, alive_r)
        code = 0
    except SystemExit:  # the server's loop ends so when every client is gone
        code = 0
    except BaseException:  # noqa: BLE001 - said on stderr; the clients see the server gone
        sys.excepthook(*sys.exc_info())
    finally:
        os._exit(code)


def _preload_while_needed(alive_r: int) -> None:
    """PRELOAD's modules not imported yet, one by one, until every client has gone (a command
    that ended on a user's error before its first worker): an orphan stops within one import."""
    import importlib
    import select

    for name in PRELOAD:
        if name not in sys.modules:
            if select.select([alive_r], [], [], 0)[0]:  # readable: EOF, nobody holds the write end
                raise SystemExit
            importlib.import_module(name)


def _default_signal_handlers() -> None:
    """What a fresh interpreter has: the caller's Python handlers (the CLI's Interrupted) are not its workers'."""
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, TypeError):
            handler = signal.getsignal(signum)
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    sys.unraisablehook = sys.__unraisablehook__


def _threads_survive_fork() -> bool:
    """A child forked from here runs a parallel region on two threads within PROBE_TIMEOUT_S."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import torch

            torch.set_num_threads(2)
            torch.ones(1 << 17).add_(1)  # at::parallel_for: OpenMP's team (grain 32768)
            torch.ones(256, 256) @ torch.ones(256, 256)  # the BLAS's threads
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def _exec_fresh_server(listener_fd: int, alive_r: int) -> None:
    """This process becomes multiprocessing's server in a fresh interpreter (same pid, socket and pipe)."""
    from multiprocessing import util

    for fd in (listener_fd, alive_r):
        os.set_inheritable(fd, True)
    command = f"import sys; sys.path[:] = {sys.path!r}; from multiprocessing.forkserver import main; main({listener_fd}, {alive_r}, {PRELOAD!r})"
    executable = spawn.get_executable()
    os.execv(executable, [executable, *util._args_from_interpreter_flags(), "-c", command])


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
        _ensure_forked_server(server)

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

        import torch._dynamo  # noqa: F401 - the capture imports it next: imported once, before the server is forked, not in both

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

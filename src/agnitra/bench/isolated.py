"""Candidates measured in a worker process that can be killed: a timeout is a timeout.

A `Worker` is a child Python process that holds its own copy of the workload and runs the
functions it is sent (`fn(workload, device, *args, progress=...)`, by reference, results
pickled back). A call that runs past its timeout gets the worker's whole process group killed
(compiler subprocesses included); so does a crash, and the next call starts a fresh worker. The
child runs in its own session, so the terminal's Ctrl-C reaches only the parent, which stops it,
and on Linux it dies with the parent even when the parent is killed outright.

How the child gets the same workload (`WorkloadSource`): rebuilt from its spec where rebuilding
is deterministic (zoo workloads, .pt2, TorchScript, ONNX files), else a pickled copy of the
prepared workload (models given as objects or made by a user's factory). Transforms and variants
the user registered in this process travel with it. Where neither works, `InProcess` runs the
same calls here and the report says that a timeout only stops a candidate between steps.
"""

from __future__ import annotations

import functools
import gc
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Callable

import torch

from agnitra.device import context_lost, spoiled
from agnitra.errors import AgnitraError, UserError, first_line
from agnitra.workloads.loaders import MODEL_FILE_SUFFIXES, USER_MODULE_PREFIX

Progress = Callable[[str, float], None]
MAX_PICKLED_BYTES = 2 * 2**30  # larger models are not copied into a worker
LEAVING_S = 10.0  # how long a worker that said it leaves is waited for before it is killed
# how long a killed worker is waited for: a process inside a GPU driver call cannot die until the
# driver returns, and an unbounded wait for it would hold the whole search there
KILLED_EXIT_S = 30.0


class WorkerTimeout(AgnitraError):
    """The call ran past its timeout; the worker was killed."""


class WorkerCrashed(AgnitraError):
    """The worker died during the call (a crash, or killed by the system)."""


class WorkerError(AgnitraError):
    """The called function raised; the message is its first line."""

    def __init__(self, message: str, user_error: bool = False) -> None:
        super().__init__(message)
        self.user_error = user_error


@dataclass
class WorkloadSource:
    """What a worker needs to hold the same workload as this process."""

    device: str
    spec: str | None = None  # rebuilt with prepare_workload(spec, **options)
    options: dict[str, Any] = field(default_factory=dict)
    pickled: bytes | None = None  # cloudpickle of the prepared Workload
    extras: bytes | None = None  # cloudpickle of user-registered transforms and variants

    def load(self):
        from agnitra.workloads.prepare import prepare_workload

        _register_extras(self.extras)
        if self.pickled is not None:
            import cloudpickle

            workload = cloudpickle.loads(self.pickled)  # our own bytes, written by the parent
            return workload, torch.device(self.device)
        return prepare_workload(self.spec, device=self.device, **self.options)


def workload_source(model: Any, load_options: dict[str, Any], workload, device: torch.device) -> tuple[WorkloadSource | None, str]:
    """How a worker can hold this workload, or None and why it cannot."""
    try:
        extras = _user_extras()
    except Exception as exc:  # noqa: BLE001 - a registration that cannot travel keeps the run here
        return None, f"a transform or variant registered in this process cannot be copied into a worker process ({first_line(exc)})"
    if isinstance(model, str) and (model.startswith(("zoo:", "gen:")) or model.lower().endswith(MODEL_FILE_SUFFIXES)):
        return WorkloadSource(str(device), spec=model, options=dict(load_options), extras=extras), ""
    size = sum(t.numel() * t.element_size() for t in list(workload.model.parameters()) + list(workload.model.buffers()))
    if size > MAX_PICKLED_BYTES:
        return None, f"the model ({size / 2**30:.1f} GiB) is too large to copy into a worker process"
    try:
        pickled = _dumps(workload)
    except Exception as exc:  # noqa: BLE001 - whatever the model holds that cannot be pickled
        return None, f"the model cannot be copied into a worker process ({first_line(exc)})"
    return WorkloadSource(str(device), pickled=pickled, extras=extras), ""


def _user_extras() -> bytes | None:
    """Transforms and variants registered outside Agnitra (a user's own), pickled by value."""
    from agnitra.bench.variants import VARIANTS
    from agnitra.transforms.base import TRANSFORMS

    def own(registry: dict) -> dict:
        return {name: entry for name, entry in registry.items() if not _module_of(entry).startswith("agnitra.")}

    extras = {"transforms": own(TRANSFORMS), "variants": own(VARIANTS)}
    if not extras["transforms"] and not extras["variants"]:
        return None
    return _cloudpickle().dumps(extras)


def _cloudpickle():
    """cloudpickle, told to copy the code of the user's model files (imported by the loader
    under names no other process can import) rather than refer to it."""
    import cloudpickle

    for name, module in list(sys.modules.items()):
        if name.startswith(USER_MODULE_PREFIX):
            cloudpickle.register_pickle_by_value(module)
    return cloudpickle


def _dumps(obj: Any) -> bytes:
    """cloudpickle's bytes of `obj`, with parametrized modules (weight norm, spectral norm, ...)
    as they are: torch refuses to pickle them ("only supported through state_dict()"), so a
    user's wav2vec2 ran its candidates in process, where a time limit stops a candidate only
    between Python steps (H200, 2026-11-27: its search printed nothing for five minutes after a
    candidate started, until the run's own limit). Such a module
    travels as its own class, its state (the ParametrizationLists with their original tensors and
    parametrizations included) and the names of its parametrized tensors; the worker gives it the
    same parametrized class and properties again (`_set_parametrized_state`): the same tensors,
    the same forward."""
    import io

    cloudpickle = _cloudpickle()
    buffer = io.BytesIO()
    _parametrized_pickler_class()(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()


@functools.cache
def _parametrized_pickler_class() -> type:
    """cloudpickle's Pickler, reducing parametrized modules as `_dumps` says (made on first use:
    cloudpickle is imported only when a model travels)."""
    import cloudpickle
    from torch.nn.utils import parametrize

    class ParametrizedPickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, torch.nn.Module) and parametrize.is_parametrized(obj) and hasattr(parametrize, "_inject_new_class"):
                plain = type(obj).__bases__[0]  # the class register_parametrization derived the module's from
                return _new_module, (plain,), (dict(obj.__dict__), list(obj.parametrizations.keys())), None, None, _set_parametrized_state
            return super().reducer_override(obj)

    return ParametrizedPickler


def _new_module(cls: type) -> torch.nn.Module:
    return cls.__new__(cls)


def _set_parametrized_state(module: torch.nn.Module, state: tuple[dict, list[str]]) -> None:
    from torch.nn.utils import parametrize

    attributes, names = state
    module.__dict__.update(attributes)
    parametrize._inject_new_class(module)
    for name in names:
        parametrize._inject_property(module, name)


def _module_of(entry: Any) -> str:
    kind = entry if isinstance(entry, type) else type(entry)
    return getattr(kind, "__module__", "") or ""


def _register_extras(extras: bytes | None) -> None:
    if not extras:
        return
    import cloudpickle

    from agnitra.bench.variants import VARIANTS
    from agnitra.transforms.base import TRANSFORMS, all_transforms

    all_transforms()  # the built-ins first
    loaded = cloudpickle.loads(extras)
    for registry, entries in ((TRANSFORMS, loaded["transforms"]), (VARIANTS, loaded["variants"])):
        for name, entry in entries.items():
            registry.setdefault(name, entry)


class Worker:
    """A killable child process holding the workload; `call` runs a function there."""

    isolated = True

    def __init__(self, source: WorkloadSource, progress: Progress | None = None) -> None:
        self.source = source
        self.progress = progress or (lambda message, fraction: None)
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.starts = 0
        self.start_s = 0.0  # how long the last start took (loading the model there): a restart's cost
        self.started_at = 0.0  # time.time() of the last start: what it wrote since is its
        self.busy = False  # a call (or the start) in flight
        self.leaving = ""  # why the worker said, answering its last call, that it exits
        self.restarted_because: list[str] = []  # why fresh workers were started for that reason
        self.left_behind: list[int] = []  # killed workers that had not exited KILLED_EXIT_S later (their pids)

    @property
    def running(self) -> bool:
        """Whether a worker is up that the next call will use (not one that said it leaves)."""
        return self.process is not None and not self.leaving

    def ensure_started(self, timeout: float) -> None:
        """Start the worker (load the model there) unless it runs; a start past `timeout` is a
        WorkerTimeout. Callers start it before timing a call, so loading is not the call's time."""
        self._forget_exited()
        if self.process is None:
            self._start(time.monotonic() + max(0.0, timeout))

    def call(self, fn: Callable, *args: Any, timeout: float) -> Any:
        """fn(workload, device, *args, progress=...) in the worker, within `timeout` seconds
        counted from now (a fresh worker's start-up included, unless started before)."""
        deadline = time.monotonic() + max(0.0, timeout)
        self._forget_exited()
        if self.process is None:
            self._start(deadline)
        import cloudpickle

        payload = cloudpickle.dumps((fn, args))  # by reference where importable, else by value
        try:
            self.conn.send(("call", payload))
        except (BrokenPipeError, OSError) as exc:
            self.stop()
            raise WorkerCrashed(f"the worker process was gone ({exc})") from None
        return self._reply(deadline, timeout)

    def _forget_exited(self) -> None:
        """A worker that said it leaves (after a call that spoiled its device state,
        `device.mark_spoiled`) is let go, so the next call starts a fresh one."""
        if self.process is not None and self.leaving:
            self.restarted_because.append(self.leaving)
            try:
                self.process.wait(timeout=LEAVING_S)
            except subprocess.TimeoutExpired:
                pass  # stop() kills it
            self.stop()

    def stop(self) -> None:
        """Kill the worker and everything it started, and remove the compiled artifacts it left
        empty in Inductor's cache (`compile_cache`); the next call starts afresh."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:  # a forked worker stopped before it made its own process group
                os.kill(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.process.wait(timeout=KILLED_EXIT_S)
        except subprocess.TimeoutExpired:  # left to the system: the search goes on with a fresh worker
            self.left_behind.append(self.process.pid)
        if self.conn is not None:
            self.conn.close()
        self.process, self.conn = None, None
        self.leaving = ""
        if self.busy:  # killed in the middle of something: it may have been writing a compile
            from agnitra.bench.compile_cache import remove_empty_artifacts

            remove_empty_artifacts(self.started_at)
        self.busy = False

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _start(self, deadline: float) -> None:
        import socket

        from agnitra.bench import fork_server

        limit = deadline - time.monotonic()  # said if the start runs past it (forking under load can take seconds of it)
        parent_end, child_end = socket.socketpair()
        self.started_at = time.time()
        if fork_server.usable(self.source.device):
            child_conn = Connection(child_end.detach())
            try:
                self.process = fork_server.start(child_conn)
            finally:
                child_conn.close()
        else:
            code = f"from agnitra.bench.isolated import worker_main; worker_main({child_end.fileno()})"
            self.process = subprocess.Popen([sys.executable, "-c", code], pass_fds=(child_end.fileno(),), start_new_session=True)
            child_end.close()
        self.conn = Connection(parent_end.detach())
        self.starts += 1
        t0 = time.monotonic()
        self.conn.send(("setup", list(sys.path), self.source))
        self._reply(deadline, limit, starting=True)
        self.start_s = time.monotonic() - t0

    def _reply(self, deadline: float, timeout: float, starting: bool = False) -> Any:
        self.busy = True
        try:
            return self._await_reply(deadline, timeout, starting)
        finally:
            self.busy = False

    def _await_reply(self, deadline: float, timeout: float, starting: bool = False) -> Any:
        what = "starting the worker (loading the model)" if starting else "the call"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise WorkerTimeout(f"ran past its time limit of {timeout:.0f} s ({what}); stopped")
            try:
                ready = self.conn.poll(min(left, 0.5))
                message = self.conn.recv() if ready else None
            except (EOFError, OSError):
                message = ("died",)
            if message is None:
                if self.process.poll() is not None:
                    message = ("died",)
                else:
                    continue
            kind = message[0]
            if kind == "progress":
                self.progress(message[1], message[2])
            elif kind in ("result", "ready"):
                self.leaving = message[-1] if kind == "result" else ""
                return message[1] if kind == "result" else None
            elif kind == "error":
                self.leaving = message[-1] if len(message) > 3 else ""
                if starting:
                    self.stop()
                raise WorkerError(message[1], user_error=message[2])
            else:
                code = self.process.wait()
                self.stop()
                raise WorkerCrashed(f"the worker process died ({_exit_reason(code)}) during {what}")


class InProcess:
    """The same calls, run in this process: for workloads a worker cannot hold. A timeout is
    raised by SIGALRM between Python steps; code inside one long C call runs on past it."""

    isolated = False

    def __init__(self, workload, device: torch.device, progress: Progress | None = None) -> None:
        self.workload, self.device = workload, device
        self.progress = progress or (lambda message, fraction: None)
        self.starts = 0
        self.start_s = 0.0
        self.running = True  # this process: never to start again

    def call(self, fn: Callable, *args: Any, timeout: float) -> Any:
        with alarm(timeout):
            try:
                return fn(self.workload, self.device, *args, progress=self.progress)
            except WorkerTimeout:
                raise
            except UserError as exc:
                raise WorkerError(str(exc), user_error=True) from exc

    def ensure_started(self, timeout: float) -> None:
        pass

    def stop(self) -> None:
        pass

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc_info) -> None:
        pass


class alarm:
    """Raise WorkerTimeout in the main thread after `seconds` (SIGALRM; Unix main thread only),
    and again every AGAIN_S until the block is left: a first one raised inside a destructor or a
    weakref callback is dropped by Python ("Exception ignored in ..."), and one caught by a broad
    `except` in library code is lost; either way the call would have run on past its limit."""

    AGAIN_S = 0.5

    def __init__(self, seconds: float) -> None:
        import threading

        self.seconds = seconds
        self.left = False
        self.usable = seconds > 0 and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self.usable:
            self.previous = signal.signal(signal.SIGALRM, self._expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds, self.AGAIN_S)
        return self

    def __exit__(self, *exc_info) -> None:
        self.left = True
        if self.usable:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)

    def _expire(self, signum, frame):
        if not self.left:
            raise WorkerTimeout(f"ran past its time limit of {self.seconds:.0f} s")


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


# ---- the child's side ------------------------------------------------------------------------


def worker_main(fd: int) -> None:
    """Entry point of a worker started as a fresh interpreter."""
    serve(Connection(fd))


def serve(conn: Connection) -> None:
    """The worker: set up, load the workload, serve calls until told to stop."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it stops us when it ends
    try:
        _, sys_path, source = conn.recv()
        sys.path[:] = sys_path
        workload, device = source.load()
        _warm_imports()
        _freeze_heap()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
        conn.send(("error", first_line(exc), isinstance(exc, UserError)))
        return
    conn.send(("ready", None))
    import cloudpickle

    def progress(message: str, fraction: float) -> None:
        conn.send(("progress", message, fraction))

    while True:
        try:
            _, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            fn, args = cloudpickle.loads(payload)
            reply = ("result", fn(workload, device, *args, progress=progress))
        except BaseException as exc:  # noqa: BLE001
            reply = ("error", str(exc) if isinstance(exc, UserError) else first_line(exc), isinstance(exc, UserError))
        # the call damaged this process's device state (a failed capture, a sticky CUDA error such as
        # an illegal memory access): it answers, says so and exits, and the next call gets a fresh one
        leaving = spoiled() or context_lost(device, failure_texts(reply))
        conn.send(reply + (leaving,))
        if leaving:
            conn.close()
            os._exit(0)


def failure_texts(reply: tuple) -> list[str]:
    """The error texts a call's reply carries: its exception, or the reasons of the failed
    candidate or variants it returned."""
    if reply[0] == "error":
        return [str(reply[1])]
    value = reply[1]
    found = [getattr(value, "reason", "") or ""]
    found += [getattr(v, "reason", "") or "" for v in getattr(value, "variants", None) or []]
    bench = getattr(value, "bench", None)  # a final run's reply
    found += [getattr(v, "reason", "") or "" for v in getattr(bench, "variants", None) or []]
    if isinstance(value, list):  # a peers' run: its variants
        found += [getattr(v, "reason", "") or "" for v in value]
    return [text for text in found if text]


def _warm_imports() -> None:
    """What every call needs, imported while the worker starts (whose time is the run's), not
    within the first call's time limit: the harness, the transforms, the compiler."""
    import importlib

    for name in ("agnitra.bench.harness", "agnitra.bench.variants", "agnitra.transforms", "torch._dynamo", "torch._inductor.compile_fx"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot load fails later, in the call that needs it
            pass


def _freeze_heap() -> None:
    """Move what the worker holds for its whole life (torch, transformers, the workload) out of
    the collector's reach: every call collects garbage a few times (freeing a candidate, the
    memory pass), and walking the ~400k objects of a transformers import took 0.2 s a collection,
    0.58 of a 0.97 s candidate run (gpt2 small, CPU VM; frozen: 1.07 -> 0.34 s,
    search-overhead-cpu-2026-11-27.json). Garbage made later, a candidate's, is still collected."""
    gc.collect()
    gc.freeze()


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, even by SIGKILL."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() == 1:  # the parent died before the call above
        os._exit(1)

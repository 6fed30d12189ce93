"""Where output goes: Agnitra's own to the user's stdout and stderr, what libraries print to a log.

Libraries print from Python and from C/C++ (ONNX exporters, Inductor's autotuning, warnings), so a
redirect of `sys.stdout` alone is not enough: while the work runs, file descriptors 1 and 2 point
at the log file, and Agnitra writes its results to duplicates of the descriptors taken before
(`UserStreams`). `--json` then leaves stdout one JSON document whatever a library prints.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from agnitra.errors import UserError
from agnitra.fileio import ensure_writable_dir

LAST_LOG = Path("logs") / "last.log"  # under the cache dir, for runs without a run folder
RUN_LOG = "agnitra.log"  # in a run folder (--out)


@dataclass
class UserStreams:
    """The user's stdout and stderr as they were before any redirect; `close()` when done."""

    stdout: IO[str]
    stderr: IO[str]
    _owned: tuple[IO[str], ...] = ()

    @classmethod
    def of_process(cls) -> "UserStreams":
        stdout, stderr = _kept(sys.stdout, 1), _kept(sys.stderr, 2)
        return cls(stdout, stderr, tuple(s for s, o in ((stdout, sys.stdout), (stderr, sys.stderr)) if s is not o))

    def close(self) -> None:
        for stream in self._owned:
            stream.close()


def _kept(stream: IO[str], fd: int) -> IO[str]:
    """A stream reaching where `stream` goes even after `fd` is pointed elsewhere: a duplicate of
    the descriptor when `stream` writes to it, else `stream` itself (a test's capture object)."""
    if not _writes_to(stream, fd):
        return stream
    stream.flush()
    return open(os.dup(fd), "w", buffering=1, encoding=getattr(stream, "encoding", None) or "utf-8", errors="replace")


def _writes_to(stream: IO[str], fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


def log_path(run_dir: Path | None, cache_dir: Path) -> Path:
    """The run folder's agnitra.log (the folder created and proven writable first: --out naming a
    file is one line before any work), else logs/last.log under the cache dir."""
    if run_dir is not None:
        return ensure_writable_dir(run_dir) / RUN_LOG
    return Path(cache_dir) / LAST_LOG


@contextmanager
def library_output_to(path: Path, header: str, echo_to: IO[str] | None = None) -> Iterator[Path]:
    """Descriptors 1 and 2 into `path` while the block runs (a run folder's log is appended to,
    logs/last.log started afresh); with `echo_to`, copied there too. `sys.stdout` and `sys.stderr`
    write to those descriptors and are left in place (a logging handler holding one keeps working
    afterwards); where they do not (a notebook, a test's capture), they point at the log meanwhile."""
    log = _open_log(path)
    log.write(f"---- {header}\n".encode("utf-8", "backslashreplace"))  # a path with undecodable bytes (surrogates) too
    _flush_python_streams()
    saved = os.dup(1), os.dup(2)
    tee = _Tee(log, echo_to) if echo_to is not None else None
    target = tee.write_fd if tee is not None else log.fileno()
    os.dup2(target, 1)
    os.dup2(target, 2)
    swapped = _swap_detached_streams(target)
    try:
        yield path
    finally:
        _flush_python_streams()
        for name, stream in swapped.items():
            setattr(sys, name, stream)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        if tee is not None:
            tee.finish()
        log.close()


def _flush_python_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _swap_detached_streams(target: int) -> dict[str, IO[str]]:
    """Point sys.stdout / sys.stderr at `target` where they do not write to fds 1 / 2; the
    originals, to put back. The stand-in is never closed: a handler may still hold it."""
    swapped = {}
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if not _writes_to(stream, fd):
            swapped[name] = stream
    if swapped:
        stand_in = open(os.dup(target), "w", buffering=1, encoding="utf-8", errors="replace")
        for name in swapped:
            setattr(sys, name, stand_in)
    return swapped


def _open_log(path: Path) -> IO[bytes]:
    mode = "wb" if path.name == LAST_LOG.name else "ab"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, mode, buffering=0)
    except OSError as exc:
        raise UserError(f"cannot write the log {path} ({exc.strerror or exc}); choose a writable --out, or set AGNITRA_CACHE_DIR") from None


class _Tee:
    """A pipe whose reader thread copies everything into the log and onto `echo_to` (--verbose)."""

    def __init__(self, log: IO[bytes], echo_to: IO[str]) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._log, self._echo_to = log, echo_to
        self._thread = threading.Thread(target=self._copy, name="agnitra-log-tee", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            self._log.write(chunk)
            self._echo_to.write(chunk.decode("utf-8", errors="replace"))
            self._echo_to.flush()

    def finish(self) -> None:
        """Close our end; the copy ends when every writer (children too) has closed theirs."""
        os.close(self.write_fd)
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            os.close(self.read_fd)

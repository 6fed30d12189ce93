"""The run folder of `optimize`: checked before any work, one run at a time, a journal to resume.

- Writability is proven before the model is built, so no work is lost to an unwritable `--out`.
- An exclusive lock (`flock` on `.agnitra.lock`) keeps a second run out of a folder in use; the
  kernel drops it when the process ends, killed or not.
- `candidates.jsonl` starts with a header naming what the results are valid for (workload, load
  options, device, versions, tolerances); `--resume` reuses them only under the same header.
  A damaged line (a run killed mid-write) is skipped with a warning, its candidate measured again.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agnitra.errors import UserError
from agnitra.fileio import ensure_writable_dir
from agnitra.results import CandidateResult, to_dict

JOURNAL = "candidates.jsonl"
LOCK = ".agnitra.lock"
JOURNAL_SCHEMA = "agnitra.journal/1"


@dataclass
class Journal:
    """What a resumed run may reuse, and what was wrong with the file."""

    results: dict[str, CandidateResult] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class RunFolder:
    """An open, locked run folder. Use as a context manager, or call `close()`."""

    def __init__(self, path: str | Path) -> None:
        self.path = ensure_writable_dir(path)
        self._lock_handle = _lock(self.path / LOCK)

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL

    def close(self) -> None:
        if self._lock_handle is not None:
            fcntl.flock(self._lock_handle, fcntl.LOCK_UN)
            self._lock_handle.close()
            self._lock_handle = None

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start_journal(self, key: dict[str, Any]) -> None:
        """A fresh journal whose header records what its results are valid for."""
        header = {"schema": JOURNAL_SCHEMA, "key": key}
        self.journal_path.write_text(json.dumps(header, sort_keys=True) + "\n")

    def resume_journal(self, key: dict[str, Any]) -> Journal:
        """The results of an earlier run under the same key; a different key is a user error."""
        if not self.journal_path.is_file():
            raise UserError(f"--resume: {self.path} holds no earlier run ({JOURNAL}); drop --resume or point --out at one")
        lines = self.journal_path.read_text(encoding="utf-8", errors="replace").splitlines()
        journal = Journal()
        header = _header(lines[0] if lines else "")
        if header is None:
            raise UserError(f"--resume: {self.journal_path} has no readable header (written by an older Agnitra, or damaged); run without --resume to start afresh")
        differences = _differences(header.get("key", {}), key)
        if differences:
            raise UserError(f"--resume: {self.path} holds results for another run ({'; '.join(differences)}); run without --resume, or choose another --out")
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                result = CandidateResult.from_dict(json.loads(line))
            except (ValueError, TypeError, KeyError) as exc:
                journal.warnings.append(f"{JOURNAL} line {number} is damaged ({type(exc).__name__}); skipped, that candidate is measured again")
                continue
            journal.results[result.key] = result
        return journal

    def append(self, result: CandidateResult) -> None:
        """One result, one line, flushed: a killed run keeps every finished candidate."""
        with open(self.journal_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(to_dict(result)) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _lock(path: Path):
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise UserError(f"{path.parent} is in use by another agnitra run (pid {owner}); wait for it to finish or choose another --out") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _header(line: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == JOURNAL_SCHEMA else None


def _differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between two journal keys, in words: 'workload zoo:minilm, now zoo:tinylm'."""
    return [f"{name} {saved.get(name)!r}, now {now.get(name)!r}" for name in sorted(set(saved) | set(now)) if saved.get(name) != now.get(name)]


# load options at prepare_workload's defaults, which the CLI passes and the SDK leaves out: the same run either way
_DEFAULTS = {"size": "full", "allow_pickle": False}


def journal_key(model: Any, load_options: dict[str, Any], workload, device_report, tolerances) -> dict[str, Any]:
    """What a journal's results are valid for: the same model, built the same way, on the same
    device and software, judged by the same tolerances."""
    from dataclasses import asdict

    from agnitra._version import __version__
    from agnitra.telemetry.signature import software_versions

    versions = software_versions()
    return {
        "workload": model if isinstance(model, str) else f"{workload.name} (a Python object)",
        "model": _fingerprint(model, workload),
        "options": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in sorted(load_options.items()) if v is not None and v != _DEFAULTS.get(k)},
        "device": device_report.signature.get("id"),
        "versions": {"agnitra": __version__, "torch": versions.get("torch"), "triton": versions.get("triton")},
        "tolerances": asdict(tolerances),
    }


def _fingerprint(model: Any, workload) -> str:
    """A file's size and modification time; a live model's parameter names, shapes and first values."""
    import hashlib

    if isinstance(model, str) and not model.startswith("zoo:"):
        path = Path(model.rsplit(":", 1)[0] if model.rsplit(":", 1)[0].endswith(".py") else model)
        if path.is_file():
            stat = path.stat()
            return f"{stat.st_size} bytes, modified {stat.st_mtime_ns}"
    if isinstance(model, str):
        return model
    digest = hashlib.sha1()
    for name, tensor in workload.model.state_dict().items():
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(tensor.detach().reshape(-1)[:64].to("cpu").float().numpy().tobytes())
    return digest.hexdigest()[:16]

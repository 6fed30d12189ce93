"""Files Agnitra writes for the user: whole or not at all, into folders checked before any work."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from agnitra.errors import UserError


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as f:  # a path's undecodable bytes (surrogates) as \udcff
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def ensure_writable_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create `path` if needed and prove a file can be written there; a one-line error if not."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path} is a file, not a folder: name a folder (it is created)")
    blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise UserError(f"{flag} {path} is inside {blocking}, a file, not a folder: name a folder (it is created)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".agnitra-probe-", delete=True)
        probe.close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"{flag} {path} cannot be written ({reason}); choose a folder you can write to") from exc
    return path


def set_aside(path: str | Path) -> Path | None:
    """Move a damaged cache file out of the way, to `<name>.corrupt` beside it (replacing an older
    one), so it can be looked at and is never read again; None when it was gone already."""
    path = Path(path)
    aside = path.with_name(path.name + ".corrupt")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return None
    return aside

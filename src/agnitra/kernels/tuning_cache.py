"""The per-device tuning cache: the best configuration per (kernel, shape bucket, dtype).

One JSON file per device signature under `<cache_dir>/tuning/<signature_id>.json`. Writers take an
exclusive lock on a sidecar file, re-read, merge their entry and replace the file atomically, so
several processes tuning at once never lose each other's results or leave a torn file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from agnitra.fileio import set_aside

CACHE_VERSION = 1


def cache_key(kernel: str, bucket: str, dtype) -> str:
    return f"{kernel}|{bucket}|{str(dtype).replace('torch.', '')}"


class TuningCache:
    def __init__(self, cache_dir: str | Path, signature_id: str) -> None:
        self.path = Path(cache_dir) / "tuning" / f"{signature_id}.json"
        self.notes: list[str] = []  # a damaged file set aside: what the caller's report should say

    def _read(self, locked: bool = False) -> dict[str, Any]:
        """The entries; a damaged file is set aside as `<name>.corrupt` (its kernels tuned again) and
        said so in `notes` and as a warning. `locked`: the caller holds the lock already."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}
        entries, damage = _parse(data)
        if damage:
            self._set_aside(data, damage, locked)
        return entries

    def _set_aside(self, data: bytes, damage: str, locked: bool) -> None:
        with contextlib.nullcontext() if locked else self._locked():
            try:  # another process may have replaced it with a good file since it was read
                if self.path.read_bytes() != data:
                    return
            except OSError:
                return
            aside = set_aside(self.path)
        if aside is not None:
            note = f"the tuning cache {self.path} was damaged ({damage}): set aside as {aside.name}; its kernels are tuned again"
            self.notes.append(note)
            warnings.warn(note, stacklevel=3)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._read().get(key)

    def entries(self) -> dict[str, Any]:
        return self._read()

    @contextlib.contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        with self._locked():
            entries = self._read(locked=True)
            entries[key] = {**entry, "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"version": CACHE_VERSION, "entries": entries}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)


def _parse(data: bytes) -> tuple[dict[str, Any], str]:
    """A cache file's entries, and what is wrong with it ('' when nothing is: an older version's file
    is no damage, its entries are simply not used)."""
    try:
        doc = json.loads(data)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return {}, f"not JSON: {str(exc).splitlines()[0][:80]}"
    if not isinstance(doc, dict) or not isinstance(doc.get("version"), int):
        return {}, f"a JSON {type(doc).__name__} without a version, not a tuning cache"
    if doc["version"] != CACHE_VERSION:
        return {}, ""
    entries = doc.get("entries")
    if not isinstance(entries, dict) or not all(isinstance(e, dict) and isinstance(e.get("config"), dict) for e in entries.values()):
        return {}, "entries missing or without a config"
    return entries, ""

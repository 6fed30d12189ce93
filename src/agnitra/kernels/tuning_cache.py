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
from pathlib import Path
from typing import Any

CACHE_VERSION = 1


def cache_key(kernel: str, bucket: str, dtype) -> str:
    return f"{kernel}|{bucket}|{str(dtype).replace('torch.', '')}"


class TuningCache:
    def __init__(self, cache_dir: str | Path, signature_id: str) -> None:
        self.path = Path(cache_dir) / "tuning" / f"{signature_id}.json"

    def _read(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return doc.get("entries", {}) if doc.get("version") == CACHE_VERSION else {}

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
            entries = self._read()
            entries[key] = {**entry, "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"version": CACHE_VERSION, "entries": entries}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)

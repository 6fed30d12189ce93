"""What a killed worker leaves in TorchInductor's on-disk cache.

A worker stopped while Inductor writes a compiled artifact can leave it empty: a zero-byte
`.so` under the cache dir. Every later compile that hashes to the same entry, in any process of
the user's, then fails ("file too short") until the file is removed: on the CPU a stopped
candidate made the compile peer of two later families fail its batch-2 check. Files written
empty since the worker started are removed when it is killed; nothing else is touched.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

ARTIFACT_SUFFIXES = (".so", ".o", ".cubin", ".ptx", ".py", ".json")  # never valid empty; lock files are


def inductor_cache_dir() -> Path | None:
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:  # another torch layout: the documented default
        return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path("/tmp") / f"torchinductor_{os.environ.get('USER', 'root')}")
    return Path(cache_dir())


def remove_empty_artifacts(since: float, root: Path | None = None) -> list[Path]:
    """Remove the empty compiled artifacts written at or after `since` (a time.time() value)
    under Inductor's cache dir (or `root`); returns what was removed."""
    root = root if root is not None else inductor_cache_dir()
    removed: list[Path] = []
    if root is None or not root.is_dir():
        return removed
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.endswith(ARTIFACT_SUFFIXES):
                continue
            path = Path(dirpath) / name
            try:
                stat = path.stat()
                if stat.st_size == 0 and stat.st_mtime >= since:
                    path.unlink()
                    removed.append(path)
            except OSError:  # gone meanwhile, or not ours to remove
                continue
    if removed:
        log.warning("removed %d empty compiled artifact(s) a stopped worker left in %s", len(removed), root)
    return removed

"""The seed: the measurements Agnitra's own collections made (`benchmarks/datasets`), shipped with
the package, so that a machine whose store holds too few measurements of its kind of device still
has a cost model for `--strategy model`, `auto` and `recommend`, and says whose measurements it
learned from. The store's own rows are added to them; once the store holds MIN_STORED of its own
(`agnitra collect`), the seed is left out. AGNITRA_COSTMODEL_SEED=0 turns it off.

`python benchmarks/datasets/make_seed.py` rewrites the file from the committed datasets
(tests/test_costmodel_seed.py checks it holds every one of their rows)."""

from __future__ import annotations

import csv
import gzip
import io
import os
from collections import Counter
from importlib import resources

from agnitra.errors import UserError

SEED_FILE = "seed.csv.gz"
ENV = "AGNITRA_COSTMODEL_SEED"
DATASET_COLUMN = "dataset"  # the committed dataset a seed row came from


def seed_enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def seed_rows(device_kind: str | None) -> list[dict]:
    """The seed's rows of this kind of device (all kinds for None), typed as dataset rows, each
    run its own group; [] where the seed is turned off."""
    from agnitra.search.costmodel.dataset import on_one_scale, typed_row, with_comparison

    if not seed_enabled():
        return []
    try:
        data = resources.files("agnitra.search.costmodel").joinpath(SEED_FILE).read_bytes()
        text = gzip.decompress(data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UserError(f"the cost model's seed ({SEED_FILE}) cannot be read: {exc}; reinstall agnitra, or set {ENV}=0") from None
    rows = [typed_row(raw, origin=f"seed:{raw.get(DATASET_COLUMN, '')}") for raw in csv.DictReader(io.StringIO(text, newline=""))]
    return on_one_scale(with_comparison([r for r in rows if device_kind is None or r.get("device_kind") == device_kind]))


def describe(rows: list[dict]) -> str:
    """Whose measurements: 'AMD EPYC (1160)' or 'NVIDIA H100 80GB HBM3 (285), NVIDIA H200 (55)'."""
    counts = Counter(r.get("device") or "?" for r in rows)
    return ", ".join(f"{name} ({n})" for name, n in counts.most_common())

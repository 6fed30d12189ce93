"""Write the cost model's seed (`agnitra.search.costmodel.seed`) from the committed datasets:
every row of benchmarks/datasets/*.csv (not the held-out sets), with the file it came from in a
`dataset` column, gzipped into src/agnitra/search/costmodel/seed.csv.gz.

    python benchmarks/datasets/make_seed.py          # after a dataset is added or changed
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from agnitra.search.costmodel.seed import DATASET_COLUMN, SEED_FILE  # noqa: E402


def dataset_paths() -> list[Path]:
    return sorted((ROOT / "benchmarks" / "datasets").glob("*.csv"))


def seed_text(paths: list[Path]) -> str:
    rows, columns = [], [DATASET_COLUMN]
    for path in paths:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            columns += [c for c in reader.fieldnames or [] if c not in columns]
            rows += [dict(row, **{DATASET_COLUMN: path.name}) for row in reader]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def main() -> None:
    target = ROOT / "src" / "agnitra" / "search" / "costmodel" / SEED_FILE
    text = seed_text(dataset_paths())
    target.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    print(f"wrote {target.relative_to(ROOT)}: {text.count(chr(10)) - 1} rows, {target.stat().st_size} bytes")


if __name__ == "__main__":
    main()

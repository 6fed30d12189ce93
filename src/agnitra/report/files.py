"""Report files on disk: report.json, metrics.csv and report.html for `bench` and `profile`.

report.json is `to_dict()` of the report (NaN and inf become null); metrics.csv is flat, one
row per variant (bench) or per operator row (profile), empty cells for missing values;
report.html is the self-contained page of `agnitra.report.html`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from agnitra.fileio import atomic_write_text
from agnitra.report.html import bench_html, profile_html
from agnitra.results import BenchReport, OpRow, ProfileReport, VariantResult

JSON_NAME = "report.json"
CSV_NAME = "metrics.csv"
HTML_NAME = "report.html"

BENCH_CSV_COLUMNS = (
    "variant",
    "status",
    "reason",
    "latency_median_ms",
    "latency_p95_ms",
    "throughput",
    "throughput_unit",
    "peak_memory_bytes",
    "model_bytes",
    "energy_j_per_item",
    "roofline_fraction",
    "correctness_metric",
    "correctness_value",
    "correctness_passed",
    "setup_s",
    "tokens_per_s",
    "per_token_median_ms",
    "per_token_p95_ms",
)
PROFILE_CSV_COLUMNS = tuple(f.name for f in dataclasses.fields(OpRow))


def write_bench_report(report: BenchReport, out_dir: Path) -> dict[str, Path]:
    """Write the three files of a bench run under `out_dir`; their paths by kind (json, csv, html)."""
    out_dir = _prepare(out_dir)
    rows = (_bench_csv_row(variant) for variant in report.variants)
    return {
        "json": _write_json(report.to_dict(), out_dir / JSON_NAME),
        "csv": _write_csv(BENCH_CSV_COLUMNS, rows, out_dir / CSV_NAME),
        "html": _write_text(bench_html(report), out_dir / HTML_NAME),
    }


def write_profile_report(report: ProfileReport, out_dir: Path) -> dict[str, Path]:
    """Write the three files of a profile run under `out_dir`; their paths by kind (json, csv, html)."""
    out_dir = _prepare(out_dir)
    rows = ([getattr(row, column) for column in PROFILE_CSV_COLUMNS] for row in report.ops)
    return {
        "json": _write_json(report.to_dict(), out_dir / JSON_NAME),
        "csv": _write_csv(PROFILE_CSV_COLUMNS, rows, out_dir / CSV_NAME),
        "html": _write_text(profile_html(report), out_dir / HTML_NAME),
    }


def _prepare(out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def _bench_csv_row(variant: VariantResult) -> list[Any]:
    latency, throughput = variant.latency_ms, variant.throughput
    check, decode = variant.correctness, variant.decode
    return [
        variant.name,
        variant.status,
        variant.reason,
        latency.median if latency else None,
        latency.p95 if latency else None,
        throughput.value if throughput else None,
        throughput.unit if throughput else None,
        variant.peak_memory_bytes,
        variant.model_bytes,
        variant.energy_j_per_item,
        variant.roofline_fraction,
        check.metric if check else None,
        check.value if check else None,
        check.passed if check else None,
        variant.setup_s,
        decode.tokens_per_s if decode else None,
        decode.per_token_ms.median if decode else None,
        decode.per_token_ms.p95 if decode else None,
    ]


def _csv_cell(value: Any) -> Any:
    """Missing values and NaN/inf as empty cells, booleans as true/false (as in the JSON)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return value


def _write_csv(columns: Sequence[str], rows: Iterable[Sequence[Any]], path: Path) -> Path:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(value) for value in row])
    return _write_text(buffer.getvalue(), path)


def _json_fallback(value: Any) -> Any:
    """Values `to_dict` leaves alone that json cannot write: numpy/torch scalars, paths, sets."""
    if hasattr(value, "item"):
        try:
            scalar = value.item()
        except (TypeError, ValueError):
            return str(value)
        if isinstance(scalar, float) and not math.isfinite(scalar):
            return None
        return scalar
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def _write_json(data: Any, path: Path) -> Path:
    return _write_text(json.dumps(data, indent=2, default=_json_fallback) + "\n", path)


def _write_text(text: str, path: Path) -> Path:
    """Whole files only: a reader (or a run killed mid-write) never sees half a report."""
    return atomic_write_text(path, text)

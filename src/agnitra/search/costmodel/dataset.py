"""The cost model's rows: from the store (`store.io.dataset_rows`) or from dataset CSV files
written by `agnitra store export --features` (the committed datasets), typed the same way."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

from agnitra.errors import UserError
from agnitra.search.costmodel.features import steps_of
from agnitra.search.reference import replays_a_graph

NUMERIC = ("params", "batch", "median_ms", "baseline_ms", "speedup", "model_bytes", "baseline_model_bytes", "peak_memory_bytes", "quality_value", "quality_error", "setup_s")


def read_dataset(paths: list[str | Path]) -> list[dict]:
    """Rows of dataset CSVs; each row's `group` says which file and run it came from."""
    rows: list[dict] = []
    for path in map(Path, paths):
        if not path.is_file():
            raise UserError(f"dataset not found: {path}; write one with `agnitra store export --csv FILE --features`")
        try:
            with path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                if not reader.fieldnames or "recipe" not in reader.fieldnames or "speedup" not in reader.fieldnames:
                    raise UserError(f"{path} is not a dataset (no recipe and speedup columns); write one with `agnitra store export --csv FILE --features`")
                for raw in reader:
                    rows.append(typed_row(raw, origin=path.name))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise UserError(f"cannot read {path}: {exc}; check the file") from None
    return rows


def load_rows(store=None, datasets: list[str | Path] | None = None, device_kind: str | None = None, skipped: list[str] | None = None) -> list[dict]:
    """The training rows: the given dataset files, else every recipe measurement in the store
    (damaged rows left out, described in `skipped`)."""
    if datasets:
        rows = read_dataset(datasets)
    else:
        from agnitra.store.io import dataset_rows

        rows = [dict(r, group=f"store:{r['run_id']}") for r in dataset_rows(store, skipped=skipped)]
    return on_one_scale(with_comparison([r for r in rows if device_kind is None or r.get("device_kind") == device_kind]))


def on_one_scale(rows: list[dict]) -> list[dict]:
    """A GPU run's speedups of recipes that replay a CUDA graph against the median of its rows'
    baselines, not each row's own: the eager baseline's time moves from one short run to the next
    on a GPU while a graph replay's does not (`search.reference`, which a search now applies as it
    measures). Rows recorded before that carry their own run's ratio; this puts them on the scale
    the search uses. Other rows keep their own: their time moves with the host's as the baseline's
    does (launched from Python), or shared load slows both alike (the CPU)."""
    baselines: dict[str, list[float]] = {}
    for r in rows:
        if r.get("device_kind") == "cuda" and r.get("baseline_ms"):
            baselines.setdefault(r.get("group") or "", []).append(r["baseline_ms"])
    for r in rows:
        run = baselines.get(r.get("group") or "")
        if run and r.get("device_kind") == "cuda" and r.get("speedup") and r.get("median_ms") and replays_a_graph(steps_of(r)):
            r["speedup"] = statistics.median(run) / r["median_ms"]
    return rows


def with_comparison(rows: list[dict]) -> list[dict]:
    """Each row's `comparison`, the check its workload was verified by (rel_error, top1, cosine,
    logits, perplexity), where the row does not say: the quality metric of any measurement of its
    run (a run verifies every candidate the same way); None where no candidate of the run was
    verified. The check, more than the model, decides whether a lossy recipe passes: without it
    the cost model gave failing candidates of unseen families a high P(pass) (docs/search.md)."""
    by_group: dict[str, str] = {}
    for r in rows:
        if r.get("quality_metric"):
            by_group.setdefault(r.get("group") or "", r["quality_metric"])
    for r in rows:
        if not r.get("comparison"):
            r["comparison"] = by_group.get(r.get("group") or "")
    return rows


def typed_row(raw: dict, origin: str) -> dict:
    """A dataset CSV row with its numbers as numbers, `passed` as a bool and `group` naming its
    origin (a file, the seed) and run."""
    row: dict = dict(raw)
    for key in NUMERIC:
        row[key] = _number(raw.get(key))
    for key, value in raw.items():
        if key.startswith(("sig.", "hot.", "dev.")):
            row[key] = _number(value)
    row["passed"] = {"True": True, "False": False}.get(raw.get("passed", ""))
    try:
        json.loads(raw.get("recipe") or "[]")
    except json.JSONDecodeError:
        row["recipe"] = "[]"
    row["group"] = f"{origin}:{raw.get('run_id', '')}"
    return row


def _number(text) -> float | None:
    if text is None or text == "":
        return None
    try:
        return float(text)
    except (TypeError, ValueError):
        return None

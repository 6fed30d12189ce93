"""`agnitra check`: the release gate for CI. The model is measured again with the baseline report's
recipe, beside its eager original in one interleaved run, and judged against the report:

- latency: the recipe's median may be at most `max_latency_regression` (10%) above the report's;
- quality: its verification figure may lose at most `max_quality_drop` (0.01) on a scale of error,
  whatever the metric: cosine, top-1 and token agreement by their drop, a relative error (and a
  perplexity rise) by its rise, a logit SQNR through the relative error it stands for.

The baseline is an `optimize` report (its chosen recipe; the original model where it returned
that) or a `bench` report (`--variant` names the row). A report from another device is refused:
latencies of two machines do not compare.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agnitra.errors import UserError

MAX_LATENCY_REGRESSION = 0.10
MAX_QUALITY_DROP = 0.01


@dataclass
class GateResult:
    passed: bool
    reason: str  # one line: what regressed, or that nothing did
    variant: str
    recipe: dict[str, Any]
    baseline_latency_ms: float
    latency_ms: float
    latency_change: float  # +0.14: 14% slower
    metric: str | None
    baseline_quality: float | None
    quality: float | None
    quality_loss: float | None  # on the error scale (see the module's doc)
    report: Any = None  # the new bench report

    def to_dict(self) -> dict[str, Any]:
        doc = {k: v for k, v in asdict(self).items() if k != "report"}
        doc["schema"] = "agnitra.check/1"
        return doc


@dataclass
class Baseline:
    device: str
    variant: str  # the row of the report judged
    recipe: dict[str, Any]
    latency_ms: float
    metric: str | None
    quality: float | None


def read_baseline(path: str | Path, variant: str | None = None) -> Baseline:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"--baseline {path}: no such file; pass the report.json of an earlier optimize or bench run") from exc
    except (OSError, ValueError) as exc:
        raise UserError(f"--baseline {path} is not a report (not JSON: {exc}); pass the report.json of an earlier optimize or bench run") from exc
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(("agnitra.optimize/", "agnitra.bench/")):
        raise UserError(f"--baseline {path} is not an optimize or bench report (schema {doc.get('schema') if isinstance(doc, dict) else None!r})")
    optimize = doc["schema"].startswith("agnitra.optimize/")
    bench = doc["bench"] if optimize else doc
    recipe = doc.get("recipe") or {"version": "agnitra.recipe/1", "steps": []} if optimize else None
    name = variant or (doc.get("chosen") or "eager" if optimize else None)
    rows = {row["name"]: row for row in bench.get("variants", [])}
    if name is None:
        raise UserError(f"--baseline {path} is a bench report: name its row with --variant (one of: {', '.join(rows)})")
    row = rows.get(name)
    if row is None or row.get("status") != "ok" or not (row.get("latency_ms") or {}).get("median"):
        raise UserError(f"--baseline {path} has no measured row '{name}' (rows: {', '.join(rows)})")
    if recipe is None:
        recipe = _recipe_of_row(name)
    correctness = row.get("correctness") or {}
    return Baseline(bench["device"]["name"], name, recipe, row["latency_ms"]["median"], correctness.get("metric"), correctness.get("value"))


def _recipe_of_row(name: str) -> dict[str, Any]:
    """A bench row's recipe: 'recipe: STEPS' rows and the named peers; eager is the original."""
    from agnitra.transforms.recipe import Recipe

    text = name.removeprefix("recipe: ")
    peers = {"eager": "", "compile": "compile", "compile-max-autotune": "compile(mode=max-autotune)", "compile-reduce-overhead": "compile(mode=reduce-overhead)",
             "onnxruntime": "onnxruntime", "onnxruntime-int8": "onnxruntime(int8=true)"}
    text = peers.get(text, text)
    return Recipe.parse(text).to_dict() if text else {"version": "agnitra.recipe/1", "steps": []}


def error_scale(metric: str | None, value: float | None) -> float | None:
    """A verification figure as an error (0 is perfect): what the gate's quality drop is measured on."""
    if metric is None or value is None:
        return None
    if metric in ("rel_error", "perplexity"):
        return value
    if metric == "logits":
        return 10 ** (-value / 20)  # SQNR dB -> relative error
    return 1.0 - value  # cosine, top-1, token agreement


def judge(baseline: Baseline, latency_ms: float, metric: str | None, quality: float | None, max_latency_regression: float, max_quality_drop: float) -> tuple[bool, str, float, float | None]:
    change = latency_ms / baseline.latency_ms - 1
    before, after = error_scale(baseline.metric, baseline.quality), error_scale(metric, quality)
    loss = after - before if before is not None and after is not None else None
    problems = []
    if change > max_latency_regression:
        problems.append(f"latency regressed {change:+.1%} ({baseline.latency_ms:.4g} -> {latency_ms:.4g} ms; allowed {max_latency_regression:.0%})")
    if loss is not None and loss > max_quality_drop:
        problems.append(f"quality dropped {loss:.4g} on the error scale ({metric} {baseline.quality:.6g} -> {quality:.6g}; allowed {max_quality_drop:g})")
    if problems:
        return False, "; ".join(problems), change, loss
    return True, f"no regression: latency {change:+.1%} ({baseline.latency_ms:.4g} -> {latency_ms:.4g} ms)" + (f", {metric} {quality:.6g} (was {baseline.quality:.6g})" if loss is not None else ""), change, loss

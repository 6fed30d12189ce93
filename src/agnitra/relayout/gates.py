"""The layout report's gates, each mode against the original model measured in the same run:
latency -20%, L2 hit rate +10 points, energy per item -15%, quality loss at most 0.1 points.

Quality loss in points: 100 x the drop of a similarity (top-1 agreement, cosine: 1 is the
original's), 100 x the relative rise of held-out perplexity, 100 x the relative error. A gate
whose figure was not measured (no GPU energy counter, no ncu, an SQNR metric with no point
scale) is `None`: neither met nor missed, with the reason. A perplexity rise is met only where its
95% interval over the held-out windows ends within 0.1 points."""

from __future__ import annotations

from dataclasses import asdict, dataclass

LATENCY_CHANGE = -0.20
L2_POINTS = 10.0
ENERGY_CHANGE = -0.15
QUALITY_POINTS = 0.1
QUALITY_TARGET = "0.1 points or less"


@dataclass
class Gate:
    name: str
    target: str
    value: float | None
    met: bool | None
    why: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def quality_loss_points(metric: str | None, value: float | None) -> float | None:
    if value is None:
        return None
    if metric in ("top1", "cosine"):
        return 100.0 * (1.0 - value)
    if metric in ("perplexity", "rel_error"):
        return 100.0 * value
    return None


def gates(original: dict, mode: dict) -> list[Gate]:
    """`original` and `mode`: {latency_ms, energy_j_per_item, l2_hit_rate_pct, quality: {metric, value}}."""
    return [
        _change("latency", "-20% or less", original.get("latency_ms"), mode.get("latency_ms"), LATENCY_CHANGE, "not timed"),
        _points("L2 hit rate", "+10 points or more", original.get("l2_hit_rate_pct"), mode.get("l2_hit_rate_pct"), mode.get("l2_why") or original.get("l2_why")),
        _change("energy per item", "-15% or less", original.get("energy_j_per_item"), mode.get("energy_j_per_item"), ENERGY_CHANGE,
                "not measured (NVML's energy counter: GPU only)"),
        _quality(mode.get("quality") or {}),
    ]


def _change(name: str, target: str, before: float | None, after: float | None, limit: float, missing: str) -> Gate:
    if not before or after is None:
        return Gate(name, target, None, None, missing)
    change = after / before - 1.0
    return Gate(name, target, round(change, 4), change <= limit)


def _points(name: str, target: str, before: float | None, after: float | None, why: str | None) -> Gate:
    if before is None or after is None:
        return Gate(name, target, None, None, why or "not measured")
    rise = after - before
    return Gate(name, target, round(rise, 2), rise >= L2_POINTS)


def _quality(quality: dict) -> Gate:
    loss = quality_loss_points(quality.get("metric"), quality.get("value"))
    if loss is None:
        return Gate("quality loss", QUALITY_TARGET, None, None, f"the {quality.get('metric') or 'quality'} metric has no point scale" if quality else "not verified")
    interval = quality.get("ci95") if quality.get("metric") == "perplexity" else None
    if not interval:
        return Gate("quality loss", QUALITY_TARGET, round(loss, 4), loss <= QUALITY_POINTS)
    low, high = (100.0 * end for end in interval)
    said = f"95% interval over the held-out windows: {low:+.2f} to {high:+.2f} points"
    if loss <= QUALITY_POINTS < high:  # within the target by its estimate only: the text cannot show it
        return Gate("quality loss", QUALITY_TARGET, round(loss, 4), False, f"{said}: not shown within 0.1 points with this much held-out text")
    return Gate("quality loss", QUALITY_TARGET, round(loss, 4), high <= QUALITY_POINTS, said)

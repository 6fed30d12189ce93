"""A layout run's measurements, mode by mode, against the original model of the same run: latency,
model memory, energy per item, L2 hit rate and quality, and the gates they meet (`gates.py`)."""

from __future__ import annotations

from agnitra.models.kv_cache import cache_bytes
from agnitra.relayout.gates import gates
from agnitra.results import BenchReport, VariantResult


def figures(row: VariantResult, l2: tuple | None, kv_bytes: int | None = None) -> dict:
    """One measured model's figures (`l2`: (reading or None, why) where the L2 rate was asked for;
    `kv_bytes`: what its KV caches hold, for a decoder with our static cache)."""
    check = row.correctness
    reading, why = l2 if l2 is not None else (None, "not measured (a CUDA GPU, ncu and --l2)")
    return {
        "status": row.status,
        "reason": row.reason,
        "latency_ms": row.latency_ms.median if row.latency_ms else None,
        "model_bytes": row.model_bytes,  # weights and buffers, the KV cache's included
        "kv_cache_bytes": kv_bytes,
        "peak_memory_bytes": row.peak_memory_bytes,
        "energy_j_per_item": row.energy_j_per_item,
        "l2_hit_rate_pct": round(reading.hit_rate_pct, 2) if reading else None,
        "l2_kernels": reading.kernels if reading else None,
        "l2_why": "" if reading else why,
        # ci95: the perplexity rise's interval over the held-out windows (verify.perplexity), where measured
        "quality": {"metric": check.metric, "value": check.value, "passed": check.passed, "ci95": (check.details or {}).get("increase_ci95"),
                    "window_log_ratios": (check.details or {}).get("window_log_ratios")} if check else None,
    }


def mode_entries(report: BenchReport, runs: dict, served: dict[str, str], l2: dict[str, tuple], original_kv_bytes: int | None = None) -> tuple[dict, list[dict]]:
    """The original's figures and each mode's (with its steps, how it was served, its speedup and
    gates). `runs`: mode -> LayoutRun; variant names are `eager` and `layout MODE`."""
    rows = {v.name: v for v in report.variants}
    original = figures(rows["eager"], l2.get("original"), original_kv_bytes)
    modes = []
    for mode, run in runs.items():
        mine = figures(rows[f"layout {mode}"], l2.get(mode), cache_bytes(run.model) if run.model is not None else None)
        speedup = original["latency_ms"] / mine["latency_ms"] if original["latency_ms"] and mine["latency_ms"] else None
        modes.append({**run.to_dict(), **mine, "served": served.get(mode, ""), "speedup": speedup,
                      "gates": [g.to_dict() for g in gates(original, mine)]})
    _against_none(modes)
    return original, modes


def _against_none(modes: list[dict]) -> None:
    """Each permuted mode's perplexity against mode `none`'s, window by window (`quality.against_none`)."""
    from agnitra.verify.perplexity import paired_change

    unpermuted = next((m for m in modes if m["mode"] == "none"), None)
    plain = ((unpermuted or {}).get("quality") or {}).get("window_log_ratios")
    for mode in modes:
        quality = mode.get("quality") or {}
        if mode is not unpermuted and plain and quality.get("window_log_ratios"):
            quality["against_none"] = paired_change(plain, quality["window_log_ratios"])

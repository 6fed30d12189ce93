"""Plain-text cells for a candidate row, shared by the console table, the HTML page and the CSV."""

from __future__ import annotations

import math

from agnitra.results import CandidateResult, own_memory_bytes


def candidate_cells(c: CandidateResult) -> list[str]:
    corr = ""
    if c.correctness is not None:
        value = "" if c.correctness.value is None else f"={c.correctness.value:.4g}"
        corr = f"{c.correctness.metric}{value} {'pass' if c.correctness.passed else 'FAIL'}"
    return [
        c.name,
        c.status,
        f"{c.speedup:.2f}x" if c.speedup else "",
        predicted_cell(c.predicted),
        f"{c.latency_ms.median:.4g}" if c.latency_ms else "",
        f"{c.baseline_ms:.4g}" if c.baseline_ms else "",
        f"{own_memory_bytes(c) / 2**20:.1f}" if c.model_bytes is not None or c.peak_memory_bytes is not None else "",
        corr,
        f"{c.prior:.2f}",
        f"{c.setup_s:.1f}" if c.setup_s is not None else "",
        c.reason,
    ]


def predicted_cell(predicted: dict | None) -> str:
    """What the cost model expected of a candidate before it was measured: speedup (x/÷ its
    spread), the probability that it passes verification, and where its time was limited, the
    probability that it finishes in that time."""
    if not predicted:
        return ""
    spread = math.exp(predicted.get("log_speedup_std") or 0.0)
    finish = f", P(finish) {predicted['p_finish']:.2f}" if predicted.get("p_finish") is not None else ""
    return f"{predicted['speedup']:.2f}x (x/÷{spread:.2f}), P(pass) {predicted['p_pass']:.2f}{finish}"

"""Which measured results count as wins, and in what order: a result beats the baseline beyond
the noise of its run (or by its medians where that could not be judged); the passing ones are
ranked for the objective; the final run holds the best FINALISTS of the search's own and the
fastest peers that passed."""

from __future__ import annotations

from agnitra.results import CandidateResult, VariantResult, own_memory_bytes

FINALISTS = 2
MIN_GAIN = 1.0  # without a noise verdict, the answer must beat the baseline's median in the final run


def beats_baseline(result: CandidateResult | VariantResult, speedup: float | None) -> bool:
    """Faster than the baseline beyond the measured noise of its run (where that could be
    judged), else by its medians."""
    if result.faster_beyond_noise is not None:
        return result.faster_beyond_noise
    return speedup is not None and speedup > MIN_GAIN


def rank(results: list[CandidateResult], objective: str) -> list[CandidateResult]:
    """Passing candidates that beat the baseline, best first for the objective."""
    fast = [r for r in results if r.recipe.get("steps") and r.passed and r.speedup is not None and beats_baseline(r, r.speedup)]
    if objective == "memory":
        return sorted(fast, key=lambda r: (own_memory_bytes(r), -(r.speedup or 0)))
    return sorted(fast, key=lambda r: -(r.speedup or 0))


def score(v: VariantResult, objective: str) -> float:
    """Lower is better."""
    if objective == "memory":
        return float(own_memory_bytes(v))
    if objective == "energy" and v.energy_j_per_item is not None:
        return v.energy_j_per_item
    return v.latency_ms.median


def final_lineup(results: list[CandidateResult], objective: str) -> tuple[list[CandidateResult], list[CandidateResult]]:
    """Who runs in the final run besides the baseline: the peers to compare against (the fastest
    compile mode that passed, and the fastest other peer that passed, ONNX Runtime), and the best
    FINALISTS recipes of the search's own (a peer that is the best so far is among the peers)."""
    from agnitra.search.peers import COMPILE_PEERS

    def fastest(kind) -> list[CandidateResult]:
        ok = [r for r in results if r.peer and kind(r.peer) and r.passed and r.speedup]
        return [max(ok, key=lambda r: r.speedup)] if ok else []

    peers = fastest(lambda name: name in COMPILE_PEERS) + fastest(lambda name: name not in COMPILE_PEERS)
    own = [r for r in rank(results, objective) if r.peer is None][:FINALISTS]
    return peers, own

"""Which measured results count as wins, and in what order: a result beats the baseline beyond
the noise of its run (or by its medians where that could not be judged); the passing ones are
ranked for the objective; the best FINALISTS go to the final run, less a recipe a peer already
runs there."""

from __future__ import annotations

from agnitra.bench.variants.recipe import RecipeVariant
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
    fast = [r for r in results if r.passed and r.speedup is not None and beats_baseline(r, r.speedup)]
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


def peer_recipe_key(peer: str) -> str | None:
    """The recipe key of a peer that is a recipe (the compile modes), else None."""
    from agnitra.bench.variants import get_variant

    try:
        variant = get_variant(peer)
    except Exception:  # noqa: BLE001 - an unknown peer is refused elsewhere
        return None
    return variant.recipe.key() if isinstance(variant, RecipeVariant) else None


def final_candidates(results: list[CandidateResult], peers: list[str], objective: str) -> list[CandidateResult]:
    """The best candidates for the final run, leaving out a recipe a peer already runs there
    (`compile-max-autotune` is `compile(mode=max-autotune)`: the peer stands for it, and if it
    wins, its recipe is the answer)."""
    in_peers = {peer_recipe_key(peer) for peer in peers}
    return [r for r in rank(results, objective) if r.key not in in_peers][:FINALISTS]

"""One optimize run: space -> strategy -> search -> final interleaved run -> the answer.

The final run measures the baseline, the peers and the best candidates side by side with full
runs, energy and correctness; the winner is chosen from that run alone (ratios measured under the
same conditions), and only if it beats the baseline. Otherwise the original model is the answer.
"""

from __future__ import annotations

import dataclasses

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from agnitra.bench.harness import BenchConfig, Harness
from agnitra.bench.variants.eager import Eager
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.models.generate import decode_one_token, prefill
from agnitra.report.schema import CandidateResult, DeviceReport, OptimizeReport, VariantResult, own_memory_bytes
from agnitra.search.space import recipe_space
from agnitra.search.strategies.base import get_strategy
from agnitra.search.tuner import SearchConfig, free_candidate, pareto_front, search
from agnitra.transforms.base import TransformContext
from agnitra.transforms.recipe import Recipe
from agnitra.verify import Tolerances
from agnitra.workloads.base import Workload

FINALISTS = 2
SEARCH_SHARE = 0.8  # of the budget; the rest is the final run
MIN_GAIN = 1.0  # the answer must beat the baseline's median in the final run


@dataclass
class OptimizeResult:
    model: torch.nn.Module
    recipe: Recipe
    report: OptimizeReport
    decode_fn: Callable = decode_one_token
    prefill_fn: Callable = prefill


def rank(results: list[CandidateResult], objective: str) -> list[CandidateResult]:
    """Passing candidates that beat the baseline, best first for the objective."""
    fast = [r for r in results if r.passed and r.speedup is not None and r.speedup > MIN_GAIN]
    if objective == "memory":
        return sorted(fast, key=lambda r: (own_memory_bytes(r), -(r.speedup or 0)))
    return sorted(fast, key=lambda r: -(r.speedup or 0))


def _score(v: VariantResult, objective: str) -> float:
    """Lower is better."""
    if objective == "memory":
        return float(own_memory_bytes(v))
    if objective == "energy" and v.energy_j_per_item is not None:
        return v.energy_j_per_item
    return v.latency_ms.median


def run_optimize(
    workload: Workload,
    device: torch.device,
    device_report: DeviceReport,
    *,
    objective: str,
    budget_s: float,
    candidate_timeout_s: float,
    tolerances: Tolerances,
    transforms: list[str] | None,
    strategy: str,
    peers: list[str],
    run_dir: Path | None,
    resume: bool,
    progress: Callable[[str, float], None] | None = None,
) -> OptimizeResult:
    progress = progress or (lambda message, fraction: None)
    t0 = time.perf_counter()
    ctx = TransformContext(workload, device)
    space, skipped = recipe_space(ctx, allowed=set(transforms) if transforms else None)
    # candidates are screened on one window of positions; the final run verifies all of them
    screening = dataclasses.replace(tolerances, check_positions=None)
    config = SearchConfig(budget_s=budget_s * SEARCH_SHARE, candidate_timeout_s=candidate_timeout_s, tolerances=screening, run_dir=run_dir, resume=resume)
    results = search(get_strategy(strategy)(space), workload, device, device_report, config, progress)
    finalists = rank(results, objective)[:FINALISTS]
    progress("final interleaved run: baseline, peers, finalists", 0.9)
    free_candidate(device)  # the final run compiles its variants afresh
    final_variants = [Eager(), *peers, *[RecipeVariant(Recipe.from_dict(r.recipe), name=r.name) for r in finalists]]
    harness = Harness(workload, device, device_report, BenchConfig(variants=final_variants, tolerances=tolerances, op_breakdown=False))
    bench = harness.run()
    recipes = {r.name: Recipe.from_dict(r.recipe) for r in finalists}
    # peers that are recipes (the compile modes) compete too: if one wins, its recipe is the answer
    recipes.update({v.name: v.recipe for v in harness.variants if isinstance(v, RecipeVariant) and v.name not in recipes})
    chosen_run = _choose(harness, list(recipes), objective)
    baseline = bench.variants[0]
    search_info = {
        "strategy": strategy,
        "budget_s": budget_s,
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "space_size": len(space),
        "evaluated": len(results),
        "not_applicable": [{"transform": s.transform, "reason": s.reason} for s in skipped],
        "candidate_timeout_s": candidate_timeout_s,
        "resumed": resume,
        "peers": list(peers),
        "finalists": [r.name for r in finalists],
    }
    if chosen_run is None:
        verdict = _nothing_helped(results, finalists, bench)
        report = OptimizeReport(bench, objective, None, Recipe().to_dict(), 1.0, results, pareto_front(results), search_info, verdict)
        return OptimizeResult(workload.model, Recipe(), report)
    chosen = chosen_run.result
    recipe = recipes[chosen.name]
    speedup = baseline.latency_ms.median / chosen.latency_ms.median
    verdict = f"{chosen.name}: {speedup:.2f}x faster than the baseline ({baseline.latency_ms.median:.3f} -> {chosen.latency_ms.median:.3f} ms), {chosen.correctness.metric} {chosen.correctness.value if chosen.correctness.value is not None else ''} within tolerance"
    report = OptimizeReport(bench, objective, chosen.name, recipe.to_dict(), speedup, results, pareto_front(results), search_info, verdict)
    if chosen.name in peers:
        report.verdict += f" (the peer '{chosen.name}' won the final run: its recipe is the answer)"
    prepared = chosen_run.prepared
    model = prepared.model if prepared.model is not None else prepared.call
    return OptimizeResult(model, recipe, report, prepared.decode_fn or decode_one_token, prepared.prefill_fn or prefill)


def _choose(harness: Harness, names: list[str], objective: str) -> Any:
    """The finalist that did best in the final run, if it passed and beat the baseline."""
    runs = {run.name: run for run in harness.runs}
    baseline = harness.runs[0].result
    best = None
    for name in names:
        run = runs.get(name)
        v = run.result if run else None
        if v is None or v.status != "ok" or v.correctness is None or not v.correctness.passed:
            continue
        if baseline.status == "ok" and v.latency_ms.median >= baseline.latency_ms.median * MIN_GAIN:
            continue  # never slower than the baseline, and not merely equal
        if best is None or _score(v, objective) < _score(best.result, objective):
            best = run
    return best


def _nothing_helped(results: list[CandidateResult], finalists: list[CandidateResult], bench) -> str:
    if not results:
        return "no candidate was measured (nothing applicable, or no budget); the original model is returned"
    if not finalists:
        passing = sum(r.passed for r in results)
        return f"none of {len(results)} candidates beat the baseline with correct outputs ({passing} passed verification); the original model is returned"
    return "the best candidates did not beat the baseline in the final interleaved run; the original model is returned"

"""The search loop: measure candidates within a budget, keep the record, pick the winner.

Each candidate runs in its own short interleaved harness run against the baseline, so its
speedup is a ratio measured under the same conditions. The runs happen in a worker process
(`bench.isolated`): a candidate that raises, crashes the process, runs out of memory, fails
verification or runs past its time limit is recorded with its reason, the worker is replaced
when it had to be killed, and the loop goes on. Every result is appended to the run folder's
journal as it is known, so a killed run resumes without measuring again what is done.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from agnitra.bench.harness import BenchConfig, Harness
from agnitra.bench.isolated import WorkerCrashed, WorkerError, WorkerTimeout
from agnitra.bench.variants.eager import Eager
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.errors import first_line
from agnitra.results import BenchReport, CandidateResult, DeviceReport, own_memory_bytes
from agnitra.search.budget import Budget
from agnitra.search.reference import ReferenceBaseline
from agnitra.search.run_folder import RunFolder
from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy
from agnitra.transforms.base import get_transform
from agnitra.transforms.recipe import Recipe
from agnitra.verify import Tolerances
from agnitra.workloads.base import Workload

MIN_CANDIDATE_S = 2.0  # below this much time, a candidate is not started


@dataclass
class SearchConfig:
    candidate_timeout_s: float = 300.0
    runs: int | None = None  # per candidate run (default: 20 calls, 4 rounds of 5, or 2 generations)
    warmup: int | None = None
    tolerances: Tolerances = field(default_factory=Tolerances)
    # verify a recipe's lossy part alone before building the rest (`verify_lossy_part`): a search
    # wants answers; a collection (`agnitra collect`) wants every recipe timed, and turns it off
    lossy_part_first: bool = True

    def bench(self, variants: list, decoder: bool) -> BenchConfig:
        """A short interleaved run: no energy, roofline, signature or operator breakdown."""
        return BenchConfig(
            variants=variants,
            runs=self.runs or (2 if decoder else 20),
            warmup=self.warmup if self.warmup is not None else (1 if decoder else 3),
            op_breakdown=False, signature=False, energy=False, roofline=False, tolerances=self.tolerances,
        )


def screening_tolerances(tolerances: Tolerances) -> Tolerances:
    """Candidates are screened on one window of a decoder's positions; the final run verifies all."""
    return dataclasses.replace(tolerances, check_positions=None)


@dataclass
class SearchOutcome:
    results: list[CandidateResult]
    notes: list[str] = field(default_factory=list)
    unmeasured: int = 0  # candidates the budget left no time for


# ---- the worker's side: these run where the workload is held --------------------------------


def screening_run(workload: Workload, device: torch.device, device_report: DeviceReport, config: SearchConfig, variants: list, progress=None) -> BenchReport:
    """The baseline and `variants` in one short interleaved run, as the search measures them;
    the compiled code and memory they held are freed after."""
    try:
        return Harness(workload, device, device_report, config.bench([Eager(), *variants], workload.decoder is not None), progress).run()
    finally:
        free_candidate(device)


def measure_candidate(workload: Workload, device: torch.device, candidate: Candidate, device_report: DeviceReport, config: SearchConfig, progress=None) -> CandidateResult:
    return evaluate(candidate, workload, device, device_report, config)


def evaluate(candidate: Candidate, workload: Workload, device: torch.device, device_report: DeviceReport, config: SearchConfig) -> CandidateResult:
    """Measure one recipe against the baseline in a short interleaved run; never raises. A recipe
    whose lossy steps are followed by others is first verified with its lossy steps alone
    (`verify_lossy_part`): where they fail, so does the recipe, and the rest is not built."""
    recipe = candidate.recipe
    result = CandidateResult(name=recipe.name, recipe=recipe.to_dict(), key=recipe.key(), prior=candidate.prior, status="ok")
    t0 = time.perf_counter()
    if config.lossy_part_first and verify_lossy_part(recipe, workload, device, device_report, config, result):
        return _timed(result, t0)
    try:
        report = screening_run(workload, device, device_report, config, [RecipeVariant(recipe)])
    except Exception as exc:  # noqa: BLE001 - the harness records variant failures; this is the rest
        result.status, result.reason = "failed", first_line(exc)
        return _timed(result, t0)
    base, cand = report.variants
    result.status, result.reason = cand.status, cand.reason
    result.latency_ms, result.peak_memory_bytes, result.correctness, result.setup_s = cand.latency_ms, cand.peak_memory_bytes, cand.correctness, cand.setup_s
    result.model_bytes, result.build_s = cand.model_bytes, cand.build_s
    if base.status != "ok":
        # nothing to compare against: never a pass, whatever the candidate did
        result.status, result.reason, result.correctness = "failed", f"the baseline failed in this candidate's run ({base.reason})", None
    elif cand.status == "ok":
        result.baseline_ms = base.latency_ms.median
        result.speedup = base.latency_ms.median / cand.latency_ms.median
        result.speedup_interval, result.faster_beyond_noise = cand.speedup_interval, cand.faster_beyond_noise
    return _timed(result, t0)


def split_after_lossy(recipe: Recipe) -> tuple[Recipe, Recipe] | None:
    """The recipe cut after its last lossy step (`Transform.lossy`): (the lossy part, the steps
    after it); None where no step is lossy or none follows the last lossy one."""
    lossy = [i for i, step in enumerate(recipe.steps) if get_transform(step.transform).lossy(step.params)]
    if not lossy or lossy[-1] == len(recipe.steps) - 1:
        return None
    cut = lossy[-1] + 1
    return Recipe(recipe.steps[:cut]), Recipe(recipe.steps[cut:])


def verify_lossy_part(recipe: Recipe, workload: Workload, device: torch.device, device_report: DeviceReport, config: SearchConfig, result: CandidateResult) -> bool:
    """Verify the recipe's lossy part alone (one timed call, the full checks) before building the
    rest; True where it failed verification, `result` then saying so (a compile or an export after
    it keeps float rounding and will not bring the numbers back within the tolerance). On an H200,
    lossy recipes that failed verification took 7 to 17 s each, most of it their compile, of the
    170 s a family had (hf_families, 2026-11-27). A lossy part that cannot be set up or run alone is
    left to the whole recipe's run."""
    split = split_after_lossy(recipe)
    if split is None:
        return False
    lossy, rest = split
    check_only = dataclasses.replace(config, runs=1, warmup=0)
    try:
        report = screening_run(workload, device, device_report, check_only, [RecipeVariant(lossy)])
    except Exception:  # noqa: BLE001 - the whole recipe's run records what goes wrong
        return False
    base, part = report.variants
    if base.status != "ok" or part.status != "ok" or part.correctness is None or part.correctness.passed:
        return False
    correctness = part.correctness
    correctness.details["verified"] = f"the lossy part alone ({lossy.name}), before {rest.name} was built"
    result.correctness, result.setup_s, result.model_bytes = correctness, part.setup_s, part.model_bytes
    result.reason = f"verification of its lossy part alone, {lossy.name}: {correctness.details.get('error', 'failed')}; {rest.name} not built"
    return True


def _timed(result: CandidateResult, t0: float) -> CandidateResult:
    result.eval_s = round(time.perf_counter() - t0, 2)
    return result


def free_candidate(device: torch.device) -> None:
    """Forget a finished candidate: its compiled code, and the memory it held.

    Every candidate compiles the same code objects (the model's forward, the decode step);
    TorchDynamo keeps a few compiled versions per code object and past that limit stops
    compiling (fullgraph) or silently runs eagerly. Resetting between candidates keeps each one
    compiled on its own.
    """
    import gc

    import torch._dynamo

    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- the parent's side ----------------------------------------------------------------------------


def run_candidate(runner, candidate: Candidate, device_report: DeviceReport, config: SearchConfig, timeout: float) -> CandidateResult:
    """One candidate through the runner; whatever happens to it becomes its record."""
    t0 = time.perf_counter()
    try:
        return runner.call(measure_candidate, candidate, device_report, config, timeout=timeout)
    except (WorkerTimeout, WorkerCrashed, WorkerError) as exc:
        status = "timeout" if isinstance(exc, WorkerTimeout) else "failed"
        recipe = candidate.recipe
        result = CandidateResult(name=recipe.name, recipe=recipe.to_dict(), key=recipe.key(), prior=candidate.prior, status=status, reason=str(exc))
        return _timed(result, t0)


def search(
    strategy: Strategy,
    runner,
    device_report: DeviceReport,
    config: SearchConfig,
    budget: Budget,
    reserve: Callable[[list[CandidateResult]], float],
    folder: RunFolder | None = None,
    done: dict[str, CandidateResult] | None = None,
    progress: Callable[[str, float], None] | None = None,
    reference: ReferenceBaseline | None = None,
) -> SearchOutcome:
    """Ask, measure, tell, until the strategy is done or the budget, less what the rest of the
    run needs (`reserve(results so far)`), is spent. A candidate whose limit is the budget's edge
    gets less where the reserve says (`reserve.if_stopped`) what the rest needs if it is stopped
    there: a fresh worker, with the finalists' compiles cold. With a `reference` (on a GPU), each
    speedup is taken against the median of the baselines measured so far, and at the end every
    result's against the median of them all (`search.reference`)."""
    progress = progress or (lambda message, fraction: None)
    done = done or {}
    outcome = SearchOutcome([])
    while True:
        strategy.time_left(max(0.0, _candidate_limit(config, budget, reserve, outcome.results, budget.remaining() - reserve(outcome.results))[0]))
        candidate = strategy.ask()
        if candidate is None:
            if strategy.stop_note():
                outcome.notes.append(strategy.stop_note())
            break
        prediction = strategy.predicted(candidate)  # before it is measured
        key = candidate.recipe.key()
        if key in done:
            result = done[key]  # measured before the run was interrupted
        else:
            left = budget.remaining() - reserve(outcome.results)
            if left >= MIN_CANDIDATE_S:
                failure = _start(runner, left)  # after a killed candidate: a fresh worker, loaded
                if failure:
                    outcome.unmeasured = _count_left(strategy, len(outcome.results))
                    outcome.notes.append(f"the worker process could not be started again ({failure}); {outcome.unmeasured} candidate(s) not measured")
                    break
                left = budget.remaining() - reserve(outcome.results)
            if left < MIN_CANDIDATE_S:
                outcome.unmeasured = _count_left(strategy, len(outcome.results))
                outcome.notes.append(f"budget: {outcome.unmeasured} candidate(s) not measured, the rest of the {budget.total_s:.0f} s budget was kept for the final run; raise --budget to measure them")
                break
            limit, at_edge = _candidate_limit(config, budget, reserve, outcome.results, left)
            if at_edge and limit < MIN_CANDIDATE_S:
                outcome.unmeasured = _count_left(strategy, len(outcome.results))
                outcome.notes.append(f"budget: {outcome.unmeasured} candidate(s) not measured: stopping one at the end of the {budget.total_s:.0f} s budget would leave too little for the final run; raise --budget to measure them")
                break
            progress(f"candidate {len(outcome.results) + 1}: {candidate.recipe.name}", min(0.9, budget.elapsed() / budget.total_s))
            result = run_candidate(runner, candidate, device_report, config, limit)
            if prediction is not None:
                result.predicted = prediction
            if folder is not None:
                folder.append(result)
        if reference is not None:
            reference.add(result.baseline_ms)
            reference.rescale(result)
        outcome.results.append(result)
        strategy.tell(candidate, result)
    outcome.notes.extend(strategy.learned_notes())
    if reference is not None:
        for result in outcome.results:  # the finalists ranked on one scale
            reference.rescale(result)
        outcome.notes.extend([reference.note()] if reference.note() else [])
    return outcome


def _candidate_limit(config: SearchConfig, budget: Budget, reserve, results: list[CandidateResult], left: float) -> tuple[float, bool]:
    """The seconds the next candidate may take, given `left` (the budget less the reserve): its
    time limit, or at the budget's edge what stopping it there leaves the rest of the run (a fresh
    worker, the finalists' compiles cold: `reserve.if_stopped`); and whether it is that edge."""
    limit = min(config.candidate_timeout_s, left)
    if_stopped = getattr(reserve, "if_stopped", None)
    if if_stopped is not None and limit == left:
        return budget.remaining() - if_stopped(results), True
    return limit, False


def _start(runner, limit: float) -> str:
    """'' once the runner is ready, else why it could not start."""
    try:
        runner.ensure_started(limit)
        return ""
    except (WorkerTimeout, WorkerCrashed, WorkerError) as exc:
        return str(exc)


def _count_left(strategy: Strategy, measured: int) -> int:
    """The space's candidates not measured (asking the strategy for all of them would cost as much
    as its space is large: minutes for a model-guided search over 10^4 recipes)."""
    return max(0, len(strategy.space) - measured)


def pareto_front(results: list[CandidateResult]) -> list[str]:
    """Passing candidates not dominated in (latency, the model's own memory, error)."""
    points = []
    for r in results:
        if not r.passed or r.latency_ms is None:
            continue
        error = _error_of(r)
        points.append((r.name, r.latency_ms.median, own_memory_bytes(r), error))
    front = []
    for name, lat, mem, err in points:
        dominated = any(
            (l2 <= lat and m2 <= mem and e2 <= err) and (l2 < lat or m2 < mem or e2 < err)
            for n2, l2, m2, e2 in points if n2 != name
        )
        if not dominated:
            front.append(name)
    return front


def _error_of(result: CandidateResult) -> float:
    """A 'lower is better' error from the correctness metric, for the Pareto comparison."""
    c = result.correctness
    if c is None or c.value is None:
        return 0.0
    if c.metric == "rel_error":
        return c.value
    if c.metric == "logits":
        return -c.value  # higher SQNR is better
    return 1.0 - c.value  # cosine, top-1 agreement

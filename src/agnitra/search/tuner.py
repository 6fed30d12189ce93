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
from agnitra.search.peers import Peer, PeerQueue
from agnitra.search.ranking import beats_baseline
from agnitra.search.reference import ReferenceBaseline
from agnitra.search.run_folder import RunFolder
from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy
from agnitra.transforms.base import get_transform
from agnitra.transforms.recipe import Recipe
from agnitra.verify import Tolerances
from agnitra.workloads.base import Workload

MIN_CANDIDATE_S = 2.0  # below this much time, a candidate is not started
# once the run holds a verified answer, one candidate of the strategy may take at most this share of
# the budget (or CANDIDATE_CAP_MIN_S): a cold max-autotune compile took 64 s of a 3-minute demo
CANDIDATE_SHARE, CANDIDATE_CAP_MIN_S = 0.2, 30.0
MIN_P_FINISH, MAX_PASSED_OVER = 0.2, 20  # a candidate less likely than this to finish in its time is not started


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
    best: CandidateResult | None = None  # the fastest verified result that beats the baseline, so far
    first_improvement_s: float | None = None  # the run's clock when the first such result was known
    interrupted: BaseException | None = None  # the Ctrl-C or SIGTERM that stopped the search
    skipped_unlikely: int = 0  # candidates passed over as unlikely to finish in the time left


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
        return failed_candidate(candidate, exc, t0)


def failed_candidate(candidate: Candidate, exc: WorkerTimeout | WorkerCrashed | WorkerError, t0: float) -> CandidateResult:
    """The record of a candidate whose call did not answer (stopped, its process died, it raised)."""
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
    peers: PeerQueue | None = None,
) -> SearchOutcome:
    """Ask, measure, tell, until the strategy and the peers are done or the budget, less what the
    rest of the run needs (`reserve(results so far)`), is spent; anytime: the outcome's `best` is
    the fastest verified result that beats the baseline so far, kept through a stop or a Ctrl-C
    (`interrupted`). The peers (`peers.PeerQueue`) take their turns in the same queue. A candidate
    whose limit is the budget's edge gets what the reserve leaves. With a `reference` (on a GPU), each speedup is taken
    against the median of the baselines measured so far (`search.reference`). A runner that measures
    several at once (`bench.ray_slots.SlotPool`, `--executor ray`) is filled by `spread.SpreadLoop`."""
    kind = _Loop
    if getattr(runner, "concurrent", False):
        from agnitra.search.spread import SpreadLoop as kind
    loop = kind(strategy, runner, device_report, config, budget, reserve, folder, done or {}, progress, reference, peers)
    try:
        loop.run()
    except BaseException as exc:  # noqa: BLE001 - an interruption (Ctrl-C, SIGTERM) keeps what was found
        if isinstance(exc, Exception):
            raise
        loop.outcome.interrupted = exc
        loop.outcome.notes.append(f"interrupted ({type(exc).__name__}) after {len(loop.outcome.results)} candidate(s); the best verified so far is the answer")
    return loop.finish()


class _Loop:
    """One search's state: what was measured, the best so far, the peers' turns."""

    def __init__(self, strategy, runner, device_report, config, budget, reserve, folder, done, progress, reference, peers) -> None:
        self.strategy, self.runner, self.device_report, self.config = strategy, runner, device_report, config
        self.budget, self.reserve, self.folder, self.done = budget, reserve, folder, done
        self.progress = progress or (lambda message, fraction: None)
        self.reference, self.peers = reference, peers
        self.outcome = SearchOutcome([])
        self.measured: dict[str, CandidateResult] = {}  # by recipe key
        self.started_s = budget.elapsed()
        self.strategy_done = False
        self.capped = False  # a candidate's limit was cut to its share of the budget
        self.passed_over = 0  # candidates passed over in a row as unlikely to finish

    def run(self) -> None:
        while True:
            left = self.budget.remaining() - self.reserve(self.outcome.results)
            peer = self.peers.due(self.budget.elapsed() - self.started_s, self.strategy_done) if self.peers else None
            if peer is not None:
                if not self._peer_turn(peer, left):
                    return
                continue
            if self.strategy_done:
                return
            candidate = self._ask(left)
            if candidate is None:
                continue
            prediction = self.strategy.predicted(candidate)
            if self._unlikely_to_finish(prediction):
                continue
            if not self._measure(candidate, prediction, tell=self.strategy.tell):
                return

    def _ask(self, left: float) -> Candidate | None:
        """The strategy's next candidate, told `left` first; None where it has none (then
        `strategy_done`) or proposed one measured already (a peer's recipe: told, not measured again)."""
        self.strategy.time_left(max(0.0, _candidate_limit(self.config, left)))
        candidate = self.strategy.ask()
        if candidate is None:
            self.strategy_done = True
            if self.strategy.stop_note():
                self.outcome.notes.append(self.strategy.stop_note())
            return None
        if candidate.recipe.key() in self.measured:
            self.strategy.tell(candidate, self.measured[candidate.recipe.key()])
            return None
        return candidate

    def _peer_turn(self, peer: Peer, left: float) -> bool:
        """Measure `peer` if its expected seconds fit what is left; False when the run must stop."""
        expected = self.peers.expected(peer)
        if peer.candidate is not None and peer.candidate.recipe.key() in self.measured:  # the strategy got there first
            self.peers.measured(peer, 0.0)
            self.measured[peer.candidate.recipe.key()].peer = peer.name
            return True
        if expected > left and self.outcome.results:  # the opener is tried whatever its estimate
            self.peers.leave_out(peer, f"expected to take {expected:.0f} s, {max(0.0, left):.0f} s were left; raise --budget to compare it")
            return True
        t0 = self.budget.elapsed()
        if peer.candidate is not None:
            def tell(candidate, result):
                if peer.space_candidate is not None:
                    self.strategy.tell(peer.space_candidate, result)
            ok = self._measure(peer.candidate, None, tell=tell, peer=peer.name)
        else:
            ok = self._measure_variant(peer.name)
        self.peers.measured(peer, self.budget.elapsed() - t0)
        return ok

    def _measure(self, candidate: Candidate, prediction, tell, peer: str | None = None) -> bool:
        """One candidate through the runner (or from the resumed journal); False when the budget
        or the worker leaves no room for it, which ends the search."""
        key = candidate.recipe.key()
        if key in self.done:
            result = self.done[key]  # measured before the run was interrupted
        else:
            limit = self._limit()
            if limit is None:
                return False
            if self.outcome.best is not None:
                limit = self._capped(limit)
            what = f"peer {peer}" if peer else f"candidate {len(self.outcome.results) + 1}: {candidate.recipe.name}"
            self.progress(what + self._best_so_far(), min(0.9, self.budget.elapsed() / self.budget.total_s))
            result = run_candidate(self.runner, candidate, self.device_report, self.config, limit)
            if prediction is not None:
                result.predicted = prediction
        result.peer = peer
        self._record(key, result)
        tell(candidate, result)
        return True

    def _measure_variant(self, name: str) -> bool:
        """A peer that is not a recipe (ONNX Runtime) beside the baseline in its own short run."""
        key = f"peer:{name}"
        if key in self.done:
            result = self.done[key]
        else:
            limit = self._limit()
            if limit is None:
                return False
            if self.outcome.best is not None:
                limit = self._capped(limit)
            self.progress(f"peer {name}{self._best_so_far()}", min(0.9, self.budget.elapsed() / self.budget.total_s))
            result = run_peer_variant(self.runner, name, self.device_report, self.config, limit)
        self._record(key, result)
        return True

    def _limit(self) -> float | None:
        """The time the next measurement may take, with a worker ready; None (and why, in the
        notes) when there is no room for one."""
        left = self.budget.remaining() - self.reserve(self.outcome.results)
        if left >= MIN_CANDIDATE_S:
            failure = _start(self.runner, left)  # after a killed candidate: a fresh worker, loaded
            if failure:
                self._stop(f"the worker process could not be started again ({failure})")
                return None
            left = self.budget.remaining() - self.reserve(self.outcome.results)
        if left < MIN_CANDIDATE_S:
            self._stop(f"the rest of the {self.budget.total_s:.0f} s budget was kept for the final run; raise --budget to measure them")
            return None
        return _candidate_limit(self.config, left)

    def _unlikely_to_finish(self, prediction: dict | None) -> bool:
        """A candidate the strategy itself gives less than MIN_P_FINISH to finish in the time left
        is passed over, not started: stopping it would also cost the worker (and the final run a
        fresh one). After MAX_PASSED_OVER in a row, the search ends."""
        if not prediction or prediction.get("p_finish", 1.0) >= MIN_P_FINISH:
            self.passed_over = 0
            return False
        self.passed_over += 1
        self.outcome.skipped_unlikely += 1
        if self.passed_over >= MAX_PASSED_OVER:
            self.strategy_done = True
            self.outcome.notes.append(f"budget: the search ended: the next {MAX_PASSED_OVER} candidates were each unlikely to finish in the time left (P(finish) < {MIN_P_FINISH})")
        return True

    def _capped(self, limit: float) -> float:
        cap = max(CANDIDATE_CAP_MIN_S, CANDIDATE_SHARE * self.budget.total_s)
        if limit > cap and not self.capped:
            self.capped = True
            self.outcome.notes.append(f"once a verified answer was held, each candidate and peer had at most {cap:.0f} s ({CANDIDATE_SHARE:.0%} of the budget), so that one slow setup does not take the time of many")
        return min(limit, cap)

    def _stop(self, why: str) -> None:
        self.outcome.unmeasured = _count_left(self.strategy, len(self.outcome.results))
        self.outcome.notes.append(f"budget: {self.outcome.unmeasured} candidate(s) not measured: {why}")

    def _record(self, key: str, result: CandidateResult) -> None:
        if key not in self.done and self.folder is not None:
            self.folder.append(result)
        reference = self._reference_of(result)
        if reference is not None:
            reference.add(result.baseline_ms)
            reference.rescale(result)
        self.outcome.results.append(result)
        self.measured[key] = result
        best = self.outcome.best
        if result.recipe.get("steps") and result.passed and beats_baseline(result, result.speedup) and (best is None or result.speedup > best.speedup):
            self.outcome.best = result
            if self.outcome.first_improvement_s is None:
                self.outcome.first_improvement_s = round(self.budget.elapsed(), 1)

    def _best_so_far(self) -> str:
        best = self.outcome.best
        return f" (best so far: {best.name}, {best.speedup:.2f}x)" if best is not None else ""

    def finish(self) -> SearchOutcome:
        outcome = self.outcome
        outcome.notes.extend(self.strategy.learned_notes())
        if outcome.skipped_unlikely:
            outcome.notes.append(f"{outcome.skipped_unlikely} candidate(s) passed over: each was unlikely to finish in the time left (P(finish) < {MIN_P_FINISH})")
        if self.peers is not None and self.peers.pending:
            for peer in list(self.peers.pending):
                self.peers.leave_out(peer, f"not reached: expected to take {self.peers.expected(peer):.0f} s; raise --budget to compare it")
        if self.peers is not None and self.peers.note():
            outcome.notes.append(self.peers.note())
        if self.reference is not None:
            for result in outcome.results:  # the finalists ranked on one scale
                self._reference_of(result).rescale(result)
            outcome.notes.extend(self._reference_notes())
            outcome.best = _best_of(outcome.results)  # the rescale can reorder them
        return outcome

    def _reference_of(self, result: CandidateResult) -> ReferenceBaseline | None:
        """The reference baseline a result's speedup is taken against (on a GPU; None on the CPU)."""
        return self.reference

    def _reference_notes(self) -> list[str]:
        return [self.reference.note()] if self.reference.note() else []


def _best_of(results: list[CandidateResult]) -> CandidateResult | None:
    fast = [r for r in results if r.recipe.get("steps") and r.passed and beats_baseline(r, r.speedup)]
    return max(fast, key=lambda r: r.speedup, default=None)


def run_peer_variant(runner, name: str, device_report: DeviceReport, config: SearchConfig, timeout: float) -> CandidateResult:
    """A peer that is not a recipe, measured beside the baseline; whatever happens is its record."""
    t0 = time.perf_counter()
    try:
        variants = runner.call(screening_variants, device_report, config, [name], timeout=timeout)
    except (WorkerTimeout, WorkerCrashed, WorkerError) as exc:
        return peer_variant_result(name, exc, t0)
    return peer_variant_result(name, variants, t0)


def peer_variant_result(name: str, answer: list | WorkerTimeout | WorkerCrashed | WorkerError, t0: float) -> CandidateResult:
    """A peer variant's record from its run's variants (the baseline, the peer), or from the error of a call that did not answer."""
    result = CandidateResult(name=name, recipe={"steps": [], "variant": name}, key=f"peer:{name}", prior=1.0, status="ok", peer=name)
    if isinstance(answer, Exception):
        result.status, result.reason = ("timeout" if isinstance(answer, WorkerTimeout) else "failed"), str(answer)
        return _timed(result, t0)
    base, variant = answer
    result.status, result.reason = variant.status, variant.reason
    result.latency_ms, result.correctness, result.setup_s = variant.latency_ms, variant.correctness, variant.setup_s
    result.peak_memory_bytes, result.model_bytes = variant.peak_memory_bytes, variant.model_bytes
    if base.status == "ok" and variant.status == "ok" and variant.latency_ms is not None:
        result.baseline_ms = base.latency_ms.median
        result.speedup = base.latency_ms.median / variant.latency_ms.median
        result.speedup_interval, result.faster_beyond_noise = variant.speedup_interval, variant.faster_beyond_noise
    return _timed(result, t0)


def screening_variants(workload: Workload, device: torch.device, device_report: DeviceReport, config: SearchConfig, names: list[str], progress=None) -> list:
    """The baseline and the named variants in one short interleaved run: their results."""
    return screening_run(workload, device, device_report, config, names, progress).variants


def _candidate_limit(config: SearchConfig, left: float) -> float:
    """The seconds the next candidate may take, given `left` (the budget less the reserve): its
    time limit, or `left` at the budget's edge. A candidate stopped there may leave the final run
    no room (a fresh worker, cold compiles): the answer is then the best verified result of the
    search, unconfirmed, which the search holds anyway."""
    return min(config.candidate_timeout_s, left)


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

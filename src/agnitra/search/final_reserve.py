"""How much of the budget the end of an optimize run needs: the final interleaved run and building
the answer, estimated before each candidate from what was measured so far (`FinalReserve`), and
kept back from the search."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from agnitra.results import CandidateResult, VariantResult
from agnitra.search.budget import Budget
from agnitra.search.ranking import FINALISTS, final_candidates, rank

# the final-run reserve (FinalReserve)
# of the budget, kept for the final run at least, whatever the estimate. At 0.1, on twelve held-out
# families (CPU, 2 min each, 2026-11-27) the floor decided 10 of 12 reserves (12 s), and the final
# run and the answer took 1.6-6.3 s of them; where the estimate was above it (14.6, 14.7 s), they took
# 11.6 and 10.6 s
RESERVE_FLOOR = 0.05
FINAL_SHARE_SCALE = 1.5  # a variant's share of the final run against a search-length run's (50 timed calls vs 20, the checks the same)
# a decoder's: 5 timed generations vs 2, and every checked position vs one window (llama-1b decode,
# H100: 26 s a variant against a peer run's 7.8 s; with 1.5 the final run was stopped 5 s short)
DECODER_FINAL_SHARE_SCALE = 3.0
WARM_EVAL = 0.35  # a setup in the final run against the search's (caches warm; H100 llama-1b: 0.2-0.27, MiniLM CPU: 0.18)
# the same in a worker started after the finalists were measured (a candidate stopped at its limit):
# only the disk caches are warm, and an ONNX export is redone (CPU, bart: two 18 s compiles did not
# fit the 27 s left and the original model was returned)
COLD_EVAL = 0.8
ENERGY_S = 1.0  # the NVML energy pass of each final-run variant on a GPU
DECODER_ENERGY_S = 3.0  # a decoder's energy pass generates (llama-1b decode, H100: 1.2-2.8 s)
# building the answer here: writing the reports, and building the recipe again in this process, as a
# fresh worker would (COLD_EVAL of what building it took in the search, `build_s`: a lazy compile
# waits for the first call; an export, or a CUDA-graph capture, which compiles, does not). A flat
# 5 s was 50x what tinylm's answer took (CPU, 60 s budget: 21 s of it unused).
ANSWER_S = 1.0
SAFETY = 1.3


@dataclass
class MeasuredRuns:
    """The runs before the search, as the final run will repeat them: the baseline alone, and
    each peer's run beside the baseline; their wall time and variants."""

    baseline_s: float
    baseline: list[VariantResult]
    peers_s: float = 0.0  # the peers' runs that finished, together
    peers: list[VariantResult] = field(default_factory=list)
    peer_runs: int = 0
    peer_baseline_ms: dict[str, float] = field(default_factory=dict)  # each peer's run: the baseline's median

    def add_peer_run(self, seconds: float, peers: list[VariantResult], baseline_ms: float | None = None) -> None:
        self.peers_s += seconds
        self.peers += peers
        self.peer_runs += 1
        if baseline_ms:
            self.peer_baseline_ms.update({v.name: baseline_ms for v in peers})

    def per_variant_s(self) -> float:
        """A variant's share of a run, setups aside: choosing held-out inputs, timing, checks."""
        if self.peers:
            rest = self.peers_s - sum(v.setup_s or 0.0 for v in self.peers)
            return max(0.0, rest) / (self.peer_runs + len(self.peers))  # each run timed the baseline too
        return max(0.0, self.baseline_s - sum(v.setup_s or 0.0 for v in self.baseline))


class FinalReserve:
    """How much of the budget the rest of the run needs, from what has been measured so far:
    the final run and building the answer here. Called before each candidate.

    The final run repeats the baseline-and-peers run with the finalists added: each variant costs
    its share of that run's work besides setups (held-out inputs, timing, checks), scaled up for
    the final run's longer timing, and WARM_EVAL of its setup (peers) or of its whole search run
    (finalists), since compilers find their caches warm by then (measured: 0.2-0.27 of a cold
    compile on the H100, 0.18 on the CPU). The final run's own time limit is what keeps the
    budget; this estimate only spares it from being cut short."""

    def __init__(self, measured: MeasuredRuns, budget: Budget, gpu: bool, restart_s: float = 0.0, decoder: bool = False,
                 running: Callable[[], bool] | None = None) -> None:
        self.share_s = (DECODER_FINAL_SHARE_SCALE if decoder else FINAL_SHARE_SCALE) * measured.per_variant_s()
        self.peers = [v for v in measured.peers if v.status == "ok"]
        self.peer_setup_s = WARM_EVAL * sum(v.setup_s or 0.0 for v in self.peers)
        self.budget = budget
        self.energy_s = (DECODER_ENERGY_S if decoder else ENERGY_S) if gpu else 0.0
        self.restart_s = restart_s  # a candidate cut short at the reserve's edge leaves a worker to start again
        # whether the worker is up now: a final run after a stopped (or spoiled) candidate starts a
        # fresh one, one after a finished candidate does not (None: not known, a restart counted)
        self.running = running

    def __call__(self, results: list[CandidateResult]) -> float:
        finalists = final_candidates(results, [v.name for v in self.peers], "latency")
        restart = self.running is None or not self.running()
        return self._estimate(results, finalists, cold=_stopped_since(results, finalists), restart=restart)

    def if_stopped(self, results: list[CandidateResult]) -> float:
        """What the rest of the run needs if the next candidate is stopped at its limit: a fresh
        worker, where the finalists' compiles find only the disk caches warm."""
        return self._estimate(results, final_candidates(results, [v.name for v in self.peers], "latency"), cold=True, restart=True)

    def _estimate(self, results: list[CandidateResult], finalists: list[CandidateResult], cold: bool, restart: bool) -> float:
        variants = 1 + len(self.peers) + len(finalists)
        factor = COLD_EVAL if cold else WARM_EVAL
        finalists_s = sum(max(0.0, factor * (r.eval_s or 0.0) - self.share_s) for r in finalists)  # beyond their share
        estimate = (self.restart_s if restart else 0.0) + (self.share_s + self.energy_s) * variants + self.peer_setup_s + finalists_s + self.assembly(results)
        return max(RESERVE_FLOOR * self.budget.total_s, SAFETY * estimate)

    def assembly(self, results: list[CandidateResult]) -> float:
        """Building the chosen recipe here: COLD_EVAL of what building the slowest finalist took in
        the search (of its whole setup where that was not recorded apart)."""
        builds = [r.build_s if r.build_s is not None else (r.setup_s or 0.0) for r in rank(results, "latency")[:FINALISTS]]
        return ANSWER_S + COLD_EVAL * max(builds, default=0.0)


def _stopped_since(results: list[CandidateResult], finalists: list[CandidateResult]) -> bool:
    """Whether a candidate was stopped (its worker killed) after a finalist was measured."""
    keys = {r.key for r in finalists}
    first = min((i for i, r in enumerate(results) if r.key in keys), default=len(results))
    return any(r.status == "timeout" for r in results[first + 1:])

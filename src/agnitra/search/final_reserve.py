"""How much of the budget the end of an optimize run needs: the final interleaved run and building
the answer, estimated before each candidate from what was measured so far (`FinalReserve`), and
kept back from the search. The final run only confirms: where it cannot finish, the best verified
result of the search is the answer, so the estimate is sized to what was measured, not padded."""

from __future__ import annotations

from typing import Callable

from agnitra.results import CandidateResult, VariantResult
from agnitra.search.budget import Budget
from agnitra.search.ranking import FINALISTS, final_lineup, rank

RESERVE_FLOOR = 0.03  # of the budget, kept for the final run at least
FINAL_SHARE_SCALE = 1.5  # a variant's share of the final run against a search-length run's (50 timed calls vs 20, the checks the same)
DECODER_FINAL_SHARE_SCALE = 3.0  # a decoder's: 5 timed generations vs 2, and every checked position vs one window
MIN_VARIANT_SHARE = 0.25  # of the baseline's run, a variant's part at least (its timing and checks)
WARM_EVAL = 0.35  # a setup in the final run against the search's (the compilers' caches warm)
COLD_EVAL = 0.8  # the same in a worker started after the finalists were measured: only the disk caches warm
ENERGY_S = 1.0  # the NVML energy pass of each final-run variant on a GPU
DECODER_ENERGY_S = 3.0  # a decoder's energy pass generates
ANSWER_S = 1.0  # writing the reports
SAFETY = 1.1


class FinalReserve:
    """How much of the budget the rest of the run needs, from what has been measured so far: the
    final run (the baseline, the peers to compare and the finalists: `ranking.final_lineup`) and
    building the answer here. Called before each candidate.

    The baseline costs what its own run took (setups aside: held-out inputs, timing, checks); each
    variant of the lineup what its search run took beyond the baseline's share of it, scaled for
    the final run's longer timing, plus WARM_EVAL of its setup (its compile, with warm caches)."""

    def __init__(self, baseline_s: float, baseline: list[VariantResult], budget: Budget, gpu: bool, restart_s: float = 0.0,
                 decoder: bool = False, running: Callable[[], bool] | None = None) -> None:
        self.baseline_s = max(0.0, baseline_s - sum(v.setup_s or 0.0 for v in baseline))
        self.scale = DECODER_FINAL_SHARE_SCALE if decoder else FINAL_SHARE_SCALE
        self.budget = budget
        self.energy_s = (DECODER_ENERGY_S if decoder else ENERGY_S) if gpu else 0.0
        self.restart_s = restart_s  # a candidate cut short at the reserve's edge leaves a worker to start again
        # whether the worker is up now: a final run after a stopped (or spoiled) candidate starts a
        # fresh one, one after a finished candidate does not (None: not known, a restart counted)
        self.running = running
        self.given_up: tuple[float, float] | None = None  # (needed s, left s) when the final run stopped fitting

    def __call__(self, results: list[CandidateResult]) -> float:
        """What to keep back now. Once even the smallest final run (the baseline and the fastest of
        the lineup) cannot fit in what is left, no final run will start: from then on only building
        the answer is kept, and the rest of the budget goes to the search."""
        lineup = self.lineup(results)
        needed = self.needed(results, lineup)
        if lineup and self.given_up is None:
            smallest = self.needed(results, [max(lineup, key=lambda r: r.speedup or 0.0)]) / SAFETY
            if smallest > self.budget.remaining():
                self.given_up = (smallest, max(0.0, self.budget.remaining()))
        return self.assembly(results) if self.given_up is not None else needed

    def note(self) -> str:
        if self.given_up is None:
            return ""
        needed, left = self.given_up
        return (f"final run: even the smallest one needed about {needed:.0f} s when {left:.0f} s were left; the rest of the budget went"
                " to the search, and the answer's figures are its search run's")

    def needed(self, results: list[CandidateResult], lineup: list[CandidateResult]) -> float:
        """What a final run of `lineup` (besides the baseline) and the answer need, kept."""
        if not lineup:  # nothing to confirm yet: no final run, the whole budget is the search's
            return ANSWER_S
        restart = self.running is None or not self.running()
        return self._estimate(results, lineup, cold=_stopped_since(results, lineup), restart=restart)

    @staticmethod
    def lineup(results: list[CandidateResult]) -> list[CandidateResult]:
        peers, own = final_lineup(results, "latency")
        return peers + own

    def variant_s(self, result: CandidateResult, factor: float) -> float:
        """What one variant of the lineup adds to the final run, from its own search run."""
        setup = result.setup_s or 0.0
        beyond_baseline = (result.eval_s or 0.0) - setup - self.baseline_s
        return self.scale * max(MIN_VARIANT_SHARE * self.baseline_s, beyond_baseline) + factor * setup

    def _estimate(self, results: list[CandidateResult], lineup: list[CandidateResult], cold: bool, restart: bool) -> float:
        factor = COLD_EVAL if cold else WARM_EVAL
        variants_s = self.baseline_s + sum(self.variant_s(r, factor) for r in lineup)
        estimate = (self.restart_s if restart else 0.0) + variants_s + self.energy_s * (1 + len(lineup)) + self.assembly(results)
        return max(RESERVE_FLOOR * self.budget.total_s, SAFETY * estimate)

    def assembly(self, results: list[CandidateResult]) -> float:
        """Building the chosen recipe here: COLD_EVAL of what building the slowest finalist took in
        the search (of its whole setup where that was not recorded apart)."""
        builds = [r.build_s if r.build_s is not None else (r.setup_s or 0.0) for r in rank(results, "latency")[:FINALISTS]]
        return ANSWER_S + COLD_EVAL * max(builds, default=0.0)


def _stopped_since(results: list[CandidateResult], lineup: list[CandidateResult]) -> bool:
    """Whether a candidate was stopped (its worker killed) after one of the lineup was measured."""
    keys = {r.key for r in lineup}
    first = min((i for i, r in enumerate(results) if r.key in keys), default=len(results))
    return any(r.status == "timeout" for r in results[first + 1:])

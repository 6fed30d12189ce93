"""How sensitive this workload is to lossy steps, from this run's own verified lossy recipes.

The cost model predicts a recipe's quality error (`Prediction.quality_error`) from other
workloads; a new architecture can be several times more sensitive than any it learned from, and
to the model a failure of one lossy transform (int8) says nothing about another (fp8).

Each lossy recipe verified here (passed or failed) measures how far its error was from the
prediction, in log10. Their mean shifts every other lossy recipe's predicted error, and
P(pass) becomes the chance that the shifted error stays within the check's threshold, with
`LOG_STD` (plus the spread of the shifts seen) as the uncertainty. The search keeps the lower of
this and the classifier's P(pass): evidence of a sensitive workload defers the rest of the lossy
recipes; evidence of a tolerant one does not make a doubtful recipe likelier.

How it was chosen and what it changed: docs/search.md.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from agnitra.search.costmodel.model import QUALITY_FLOOR, Prediction
from agnitra.search.space import Candidate
from agnitra.transforms.base import get_transform

LOG_STD = 0.3  # how far a shifted predicted error is off, in log10 (a factor of 2)
FAR_BELOW = 0.01  # errors under this share of the threshold count as this share (`_log`)


def is_lossy(candidate: Candidate) -> bool:
    return any(get_transform(step.transform).lossy(dict(step.params)) for step in candidate.recipe.steps)


class Sensitivity:
    """The shifts (log10 measured over predicted quality error) of this run's verified lossy recipes."""

    def __init__(self) -> None:
        self._lossy: dict[str, bool] = {}
        self.shifts: list[float] = []
        self.threshold: float | None = None  # the check's threshold, as a quality error (`results.quality_error`)

    def learn(self, candidate: Candidate, result: Any, predicted: Prediction | None) -> None:
        from agnitra.results import quality_error

        correctness = getattr(result, "correctness", None)
        if getattr(result, "status", "") != "ok" or correctness is None or correctness.value is None or not self.lossy(candidate):
            return
        if correctness.threshold is not None:
            self.threshold = quality_error(correctness.metric, correctness.threshold)
        if predicted is None or predicted.quality_error is None:
            return
        measured = quality_error(correctness.metric, correctness.value)
        self.shifts.append(self._log(measured) - self._log(predicted.quality_error))

    def pass_probability(self, candidate: Candidate, predicted: Prediction | None) -> float | None:
        """P(the candidate's error, shifted as this workload's were, stays within the threshold);
        None for a lossless candidate, or where nothing lossy was verified here yet."""
        if not self.shifts or not self.threshold or predicted is None or predicted.quality_error is None or not self.lossy(candidate):
            return None
        spread = statistics.pstdev(self.shifts) if len(self.shifts) > 1 else 0.0
        expected = self._log(predicted.quality_error) + statistics.fmean(self.shifts)
        return statistics.NormalDist().cdf((self._log(self.threshold) - expected) / math.hypot(LOG_STD, spread))

    def lossy(self, candidate: Candidate) -> bool:
        key = candidate.recipe.key()
        if key not in self._lossy:
            self._lossy[key] = is_lossy(candidate)
        return self._lossy[key]

    def _log(self, error: float) -> float:
        """log10 of an error, floored at FAR_BELOW of the threshold: ratios between errors far
        within it are noise (a recipe predicted at 1e-7 that measured 0.005 says little about one
        predicted at 0.003)."""
        floor = self.threshold * FAR_BELOW if self.threshold else QUALITY_FLOOR
        return math.log10(max(error, floor))

    def describe(self) -> str:
        if not self.shifts:
            return ""
        return f"lossy recipes err {10 ** statistics.fmean(self.shifts):.2g}x what the cost model predicted on this workload ({len(self.shifts)} verified)"

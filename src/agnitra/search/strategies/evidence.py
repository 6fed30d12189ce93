"""What this run's own failures say about recipes not yet measured, applied directly where one
measurement would barely move a learned model (a leaf needs several rows): a lossy step
(`Transform.lossy`) of a recipe that failed verification, or the step a failed setup names,
keeps SAME_STEP_PASS of its probability of passing per failure, the transform's other settings
SAME_TRANSFORM_PASS; a timeout makes recipes with its steps expected to take at least the limit
it ran past; a recipe with the step that passes clears the suspicion."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agnitra.search.costmodel.model import timeout_limit
from agnitra.search.space import Candidate
from agnitra.transforms.base import get_transform

SAME_STEP_PASS = 0.15  # P(pass) kept per failure of the very step (transform and parameters) in this run
SAME_TRANSFORM_PASS = 0.6  # per failure of the transform with other parameters (another int4 group size)


class RunEvidence:
    """What this run's own failures say about the steps of recipes not yet measured."""

    def __init__(self) -> None:
        self.failed_steps: Counter[str] = Counter()  # step label -> failures it is a suspect of
        self.failed_transforms: Counter[str] = Counter()
        self.slow: dict[str, float] = {}  # step label -> seconds a recipe with it ran past

    def learn(self, candidate: Candidate, result: Any) -> None:
        steps = candidate.recipe.steps
        status, reason = getattr(result, "status", "failed"), getattr(result, "reason", "") or ""
        if status == "timeout":
            limit = timeout_limit(reason) or 0.0
            for step in steps:
                self.slow[step.label()] = max(self.slow.get(step.label(), 0.0), limit)
            return
        if status == "ok" and getattr(result, "passed", False):
            for step in steps:
                cleared = self.failed_steps.pop(step.label(), 0)
                self.failed_transforms[step.transform] = max(0, self.failed_transforms[step.transform] - cleared)
                self.slow.pop(step.label(), None)
            return
        if status == "ok":  # measured, failed verification: its lossy steps are the suspects
            suspects = [s for s in steps if get_transform(s.transform).lossy(dict(s.params))]
        else:  # failed to set up or run: the step its error names, if it names one
            suspects = [s for s in steps if f"PatchError: {s.label()}:" in reason]
        for step in suspects:
            self.failed_steps[step.label()] += 1
            self.failed_transforms[step.transform] += 1

    def pass_factor(self, candidate: Candidate) -> float:
        factor = 1.0
        for step in candidate.recipe.steps:
            same = self.failed_steps.get(step.label(), 0)
            other = self.failed_transforms.get(step.transform, 0) - same
            factor *= SAME_STEP_PASS**same * SAME_TRANSFORM_PASS ** max(0, other)
        return factor

    def least_seconds(self, candidate: Candidate) -> float:
        return max((self.slow.get(step.label(), 0.0) for step in candidate.recipe.steps), default=0.0)

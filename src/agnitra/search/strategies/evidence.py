"""What this run's own failures say about recipes not yet measured, applied directly where one
measurement would barely move a learned model (a leaf needs several rows): a lossy step
(`Transform.lossy`) of a recipe that failed verification, or the step a failed setup names,
keeps SAME_STEP_PASS of its probability of passing per failure, the transform's other settings
SAME_TRANSFORM_PASS; a timeout makes recipes with its steps expected to take at least the limit
it ran past; a recipe with the step that passes clears the suspicion. What this workload's
built recipes took to set up is applied too: a recipe with a compiler or runtime step (compile,
CUDA graphs, ONNX Runtime) is expected to take at least the least any recipe with that
transform took here (the peers' compiles are the first)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agnitra.search.costmodel.model import timeout_limit
from agnitra.search.space import Candidate
from agnitra.search.strategies.blocking import step_named
from agnitra.transforms.base import get_transform

SAME_STEP_PASS = 0.15  # P(pass) kept per failure of the very step (transform and parameters) in this run
SAME_TRANSFORM_PASS = 0.6  # per failure of the transform with other parameters (another int4 group size)
RUNTIME_STAGES = ("runtime", "backend")  # compile, CUDA graphs, threads, ONNX Runtime: their setup is this workload's


def has_runtime_step(candidate: Candidate) -> bool:
    """Whether the recipe has a compiler or runtime step (its setup is this workload's)."""
    return any(get_transform(step.transform).stage in RUNTIME_STAGES for step in candidate.recipe.steps)


class RunEvidence:
    """What this run's own failures say about the steps of recipes not yet measured."""

    def __init__(self) -> None:
        self.failed_steps: Counter[str] = Counter()  # step label -> failures it is a suspect of
        self.failed_transforms: Counter[str] = Counter()
        self.slow: dict[str, float] = {}  # step label -> seconds a recipe with it ran past
        self.setup: dict[str, float] = {}  # compiler/runtime transform -> the least a built recipe with it took here

    def learn(self, candidate: Candidate, result: Any) -> None:
        steps = candidate.recipe.steps
        status, reason = getattr(result, "status", "failed"), getattr(result, "reason", "") or ""
        self._learn_setup(candidate, result)
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
        else:  # failed to set up or run, or found not applicable: the step its reason names, if it names one
            named = step_named(reason, steps)
            suspects = [named] if named is not None else []
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
        """The seconds the candidate is expected to take at least: what a recipe with one of its
        steps ran past, or what its compiler or runtime transform took on this workload."""
        steps = candidate.recipe.steps
        return max([self.slow.get(step.label(), 0.0) for step in steps] + [self.setup.get(step.transform, 0.0) for step in steps], default=0.0)

    def _learn_setup(self, candidate: Candidate, result: Any) -> None:
        """A recipe built whole and timed (not one stopped, nor one whose lossy part failed alone):
        its setup is the least its compiler and runtime transforms are expected to take here: the
        cost model, learned on other models, can expect a fraction of what they take on this one."""
        setup_s = getattr(result, "setup_s", None)
        if getattr(result, "status", "") != "ok" or getattr(result, "speedup", None) is None or not setup_s:
            return
        for step in candidate.recipe.steps:
            if get_transform(step.transform).stage in RUNTIME_STAGES:
                self.setup[step.transform] = min(self.setup.get(step.transform, setup_s), setup_s)

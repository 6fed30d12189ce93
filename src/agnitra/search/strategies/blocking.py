"""What every strategy that walks the recipe space shares: a step that failed on its own (crashed,
or its outputs failed verification) blocks every recipe that uses it with the same parameters,
and so does a module step that failed beside runtime steps only: composing a module transform
with a compiler will not fix its numerics, and a runtime step that cannot set up on this model
alone (CUDA graphs around a forward that synchronises) will not set up after a module transform
either. A failure whose reason names its step (`step_named`: a step that raised, or one that found
as it was applied that it does not apply here) blocks that step, whatever else the recipe had: a
forward that synchronises refuses CUDA graphs after fuse-projections as it would alone, while
fuse-projections may still go with compile. A timeout blocks nothing: another recipe may be
quicker."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.transforms.base import Step, get_transform


class FailedSteps:
    def __init__(self) -> None:
        self.blocked: set[str] = set()  # labels of module steps that failed on their own

    def allows(self, candidate: Candidate) -> bool:
        return not any(step.label() in self.blocked for step in candidate.recipe.steps)

    def learn(self, candidate: Candidate, result: Any) -> None:
        if getattr(result, "status", "ok") == "ok" and getattr(result, "passed", True):
            return
        if getattr(result, "status", "") == "timeout":
            return
        steps = candidate.recipe.steps
        named = step_named(getattr(result, "reason", "") or "", steps)
        if named is not None:
            self.blocked.add(named.label())
            return
        module_steps = [s for s in steps if get_transform(s.transform).stage == "module"]
        if len(steps) == 1:
            self.blocked.add(steps[0].label())
        elif len(module_steps) == 1:
            self.blocked.add(module_steps[0].label())


def step_named(reason: str, steps: list[Step]) -> Step | None:
    """The step a failure's reason names: 'setup: PatchError: LABEL: ...' (a step that raised
    while it was applied) or 'LABEL: ...' (`patcher.StepNotApplicable`), else None."""
    for step in steps:
        label = step.label()
        if reason.startswith(f"{label}: ") or f"PatchError: {label}: " in reason:
            return step
    return None

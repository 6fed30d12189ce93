"""What every strategy that walks the recipe space shares: a module transform that failed on its
own (crashed, or its outputs failed verification) blocks every recipe that uses it with the same
parameters, since composing it with a compiler will not fix its numerics."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.transforms.base import get_transform


class FailedSteps:
    def __init__(self) -> None:
        self.blocked: set[str] = set()  # labels of module steps that failed on their own

    def allows(self, candidate: Candidate) -> bool:
        return not any(step.label() in self.blocked for step in candidate.recipe.steps)

    def learn(self, candidate: Candidate, result: Any) -> None:
        if getattr(result, "status", "ok") == "ok" and getattr(result, "passed", True):
            return
        module_steps = [s for s in candidate.recipe.steps if get_transform(s.transform).stage == "module"]
        if len(module_steps) == 1 and getattr(result, "status", "") != "timeout":
            self.blocked.add(module_steps[0].label())

"""`enumerate`: the rule-pruned space in order of its priors, skipping what failed already.

When a recipe with a single module transform fails (its transform crashes or its outputs fail
verification), every other recipe using that transform with the same parameters is skipped:
composing it with a compiler will not fix its numerics.
"""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy, register_strategy
from agnitra.transforms.base import get_transform


@register_strategy
class Enumerate(Strategy):
    name = "enumerate"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__(space)
        self._next = 0
        self.blocked: set[str] = set()  # labels of module steps that failed on their own

    def ask(self) -> Candidate | None:
        while self._next < len(self.space):
            candidate = self.space[self._next]
            self._next += 1
            if not any(step.label() in self.blocked for step in candidate.recipe.steps):
                return candidate
        return None

    def tell(self, candidate: Candidate, result: Any) -> None:
        if getattr(result, "status", "ok") == "ok" and getattr(result, "passed", True):
            return
        module_steps = [s for s in candidate.recipe.steps if get_transform(s.transform).stage == "module"]
        if len(module_steps) == 1 and getattr(result, "status", "") != "timeout":
            self.blocked.add(module_steps[0].label())

"""`enumerate`: the rule-pruned space in order of its priors, skipping what failed already
(`blocking.FailedSteps`)."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy, register_strategy
from agnitra.search.strategies.blocking import FailedSteps


@register_strategy
class Enumerate(Strategy):
    name = "enumerate"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__(space)
        self._next = 0
        self.failed = FailedSteps()

    def ask(self) -> Candidate | None:
        while self._next < len(self.space):
            candidate = self.space[self._next]
            self._next += 1
            if self.failed.allows(candidate):
                return candidate
        return None

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.failed.learn(candidate, result)

"""`random`: the space in a seeded random order, skipping what failed already. The baseline a
smarter strategy must beat: it uses no prior."""

from __future__ import annotations

import random
from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy, register_strategy
from agnitra.search.strategies.blocking import FailedSteps


@register_strategy
class RandomOrder(Strategy):
    name = "random"

    def __init__(self, space: list[Candidate], seed: int = 0) -> None:
        super().__init__(space)
        self._order = list(self.space)
        random.Random(seed).shuffle(self._order)
        self.failed = FailedSteps()

    def ask(self) -> Candidate | None:
        while self._order:
            candidate = self._order.pop(0)
            if self.failed.allows(candidate):
                return candidate
        return None

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.failed.learn(candidate, result)

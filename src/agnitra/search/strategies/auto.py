"""`auto`: the strategy that fits the space: every candidate in the order of the transforms'
priors (`enumerate`) when a budget can plausibly measure them all, Optuna's TPE (`tpe`) when the
space is larger."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy, register_strategy
from agnitra.search.strategies.enumerate import Enumerate
from agnitra.search.strategies.tpe import TPE

ENUMERATE_UP_TO = 32  # candidates


@register_strategy
class Auto(Strategy):
    name = "auto"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__(space)
        self.chosen: Strategy = Enumerate(space) if len(space) <= ENUMERATE_UP_TO else TPE(space)

    def ask(self) -> Candidate | None:
        return self.chosen.ask()

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.chosen.tell(candidate, result)

"""`auto`: the strategy that fits the space: every candidate in the order of the transforms'
priors (`enumerate`) when a budget can plausibly measure them all; when the space is larger, the
cost model (`model`) where the store holds enough measurements on this kind of device to train
it, else Optuna's TPE (`tpe`). The notes say which, and why."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import SearchContext, Strategy, register_strategy
from agnitra.search.strategies.enumerate import Enumerate
from agnitra.search.strategies.model import ModelGuided
from agnitra.search.strategies.tpe import TPE

ENUMERATE_UP_TO = 32  # candidates


@register_strategy
class Auto(Strategy):
    name = "auto"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__(space)
        self.chosen: Strategy = Enumerate(space) if len(space) <= ENUMERATE_UP_TO else TPE(space)

    def attach(self, context: SearchContext) -> list[str]:
        if len(self.space) <= ENUMERATE_UP_TO:
            return [f"auto: enumerate ({len(self.space)} candidates, at most {ENUMERATE_UP_TO})"]
        guided = ModelGuided(self.space)
        notes = guided.attach(context)
        if guided.model is None:
            return [f"auto: tpe ({len(self.space)} candidates; no cost model)"] + notes
        self.chosen = guided
        return [f"auto: model ({len(self.space)} candidates)"] + notes

    def predicted(self, candidate: Candidate) -> dict | None:
        return self.chosen.predicted(candidate)

    def learned_from_store(self) -> bool:
        return self.chosen.learned_from_store()

    def stop_note(self) -> str:
        return self.chosen.stop_note()

    def time_left(self, seconds: float | None) -> None:
        self.chosen.time_left(seconds)

    def ask(self) -> Candidate | None:
        return self.chosen.ask()

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.chosen.tell(candidate, result)

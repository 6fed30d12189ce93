"""`auto`, the default: the cost model (`model`) where one trains for this kind of device (the
store's measurements, or the seed datasets shipped with the package), else every candidate in an
order that puts those likely to pass this run's tolerance first: recipes without a lossy step
(`Transform.lossy`) before those with one, each in the order of the transforms' priors. A space of
at most `FEW` candidates without a compile step takes the second order: measuring them all takes
less time than fitting the model. Around either, `FamilyGate`: near-identical variants wait once
their family failed verification. The notes say which order ran, and why."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import SearchContext, Strategy, register_strategy
from agnitra.search.strategies.enumerate import Enumerate
from agnitra.search.strategies.family import FamilyGate
from agnitra.search.strategies.finish import setup_class
from agnitra.search.strategies.model import ModelGuided
from agnitra.transforms.base import get_transform


FEW = 4  # candidates measured in prior order without fitting the cost model (~2 s of fits on 2 cores)


def lossy(candidate: Candidate) -> bool:
    return any(get_transform(step.transform).lossy(step.params) for step in candidate.recipe.steps)


def pass_first(space: list[Candidate]) -> list[Candidate]:
    """Lossless recipes first, then lossy ones, each by prior (a stable sort keeps ties in order)."""
    return sorted(space, key=lambda c: (lossy(c), -c.prior))


@register_strategy
class Auto(Strategy):
    name = "auto"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__(space)
        self.chosen: Strategy = FamilyGate(Enumerate(pass_first(space)))
        self.guided = False
        self.rest: Strategy | None = None  # after the model's stop rule: the rest, lossless first

    def attach(self, context: SearchContext) -> list[str]:
        if len(self.space) <= FEW and not any(setup_class(c.recipe.to_dict()["steps"]) for c in self.space):
            return [f"auto: lossless recipes first, by prior ({len(self.space)} candidates without a compile step: all measured sooner than a cost model is fitted)"]
        guided = ModelGuided(self.space)
        notes = guided.attach(context)
        if guided.model is None:
            return [f"auto: lossless recipes first, by prior ({len(self.space)} candidates; no cost model)"] + notes
        self.chosen, self.guided = FamilyGate(guided), True
        return [f"auto: model ({len(self.space)} candidates)"] + notes

    def predicted(self, candidate: Candidate) -> dict | None:
        return self.chosen.predicted(candidate)

    def learned_from_store(self) -> bool:
        return self.chosen.learned_from_store()

    def stop_note(self) -> str:
        return ""  # the model's stop rule does not end an anytime search: the rest follows (`ask`)

    def learned_notes(self) -> list[str]:
        stopped = self.chosen.stop_note()
        then = [f"{stopped}; the budget left went to the other candidates, lossless first"] if stopped and self.rest is not None else []
        return self.chosen.learned_notes() + then

    def time_left(self, seconds: float | None) -> None:
        self.chosen.time_left(seconds)

    def ask(self) -> Candidate | None:
        if self.rest is not None:
            return self.rest.ask()
        candidate = self.chosen.ask()
        if candidate is None and self.guided and self.chosen.stop_note():
            self.rest = FamilyGate(Enumerate(pass_first(self.space)))
            return self.rest.ask()
        return candidate

    def tell(self, candidate: Candidate, result: Any) -> None:
        (self.rest or self.chosen).tell(candidate, result)

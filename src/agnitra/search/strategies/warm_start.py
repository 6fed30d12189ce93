"""Around any strategy, what is known before it asks. `WarmStart`: the recipes that passed on the
nearest stored workloads are measured first, whatever the strategy's own order, and the strategy
is told their results (a cost model learns from them, Optuna adds them as trials); afterwards the
strategy asks as it would, and what it proposes that was measured already is passed over. The
advisor's valid recipes (`search.advisor`) go first of all (`led_by`)."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import SearchContext, Strategy


class Around(Strategy):
    """A strategy around another: what it does not change is the inner strategy's."""

    def __init__(self, inner: Strategy) -> None:
        super().__init__(inner.space)
        self.inner = inner

    def attach(self, context: SearchContext) -> list[str]:
        return self.inner.attach(context)

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.inner.tell(candidate, result)

    def predicted(self, candidate: Candidate) -> dict | None:
        return self.inner.predicted(candidate)

    def learned_from_store(self) -> bool:
        return self.inner.learned_from_store()

    def stop_note(self) -> str:
        return self.inner.stop_note()

    def learned_notes(self) -> list[str]:
        return self.inner.learned_notes()

    def time_left(self, seconds: float | None) -> None:
        self.inner.time_left(seconds)


class WarmStart(Around):
    name = "warm-start"

    def __init__(self, first: list[Candidate], inner: Strategy) -> None:
        super().__init__(inner)
        self.first = list(first)
        self.measured: set[str] = set()

    def ask(self) -> Candidate | None:
        while self.first:
            candidate = self.first.pop(0)
            if candidate.recipe.key() not in self.measured:
                self.measured.add(candidate.recipe.key())
                return candidate
        while (candidate := self.inner.ask()) is not None:
            if candidate.recipe.key() not in self.measured:
                self.measured.add(candidate.recipe.key())
                return candidate
        return None


def led_by(searcher: Strategy, advised: list[Candidate], recommended: list[Candidate]) -> Strategy:
    """The advisor's recipes first, then the store's recommendations, then the strategy's own
    order; a strategy that leads with the advisor's itself (`llm`) takes the store's after them."""
    if isinstance(searcher, WarmStart):
        searcher.first += recommended
        return searcher
    first = advised + recommended
    return WarmStart(first, searcher) if first else searcher

"""`llm`: the advisor's valid recipes first (`search.advisor`: an OpenAI-compatible endpoint asked
with `--advisor`), in the order it proposed them, then the default order (`auto`). Without a valid
proposal (the endpoint failed, or every recipe was rejected) it is `auto`, and the notes say so."""

from __future__ import annotations

from agnitra.search.space import Candidate
from agnitra.search.strategies.auto import Auto
from agnitra.search.strategies.base import SearchContext, register_strategy
from agnitra.search.strategies.warm_start import WarmStart


@register_strategy
class Llm(WarmStart):
    name = "llm"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__([], Auto(space))

    def attach(self, context: SearchContext) -> list[str]:
        self.first = list(context.advised)
        lead = f"llm: the advisor's {len(self.first)} valid recipe(s) first, then the default order" if self.first else "llm: no valid recipe from the advisor; the default order"
        return [lead] + self.inner.attach(context)

"""How a search runs: its budget, its time limit per candidate, its strategy, what it may try,
the peers it is measured against, the LLM advisor it may ask, and where its candidates are measured. `agnitra.optimize(..., search=SearchSettings(...))`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence


@dataclass(frozen=True)
class SearchSettings:
    budget: str | float = "10m"  # the whole run, e.g. "3m", 600
    candidate_timeout: str | float = "5m"  # one candidate's run, past which its worker is stopped
    strategy: str = "auto"  # the cost model where one trains, else lossless recipes first
    transforms: Sequence[str] | None = None  # search only these
    exclude_transforms: Sequence[str] | None = None  # search all but these
    peers: Sequence[str] | None = None  # measured beside the answer; None: the best built-in ones
    advisor: str | None = None  # an OpenAI-compatible endpoint's URL: its recipes measured first (off by default)
    advisor_model: str | None = None  # the model that endpoint serves
    executor: str = "local"  # where candidates are measured: local (one worker process, one at a time) or ray (slots on a Ray cluster)
    evaluators: int | None = None  # with executor ray: the evaluation slots measuring at once (None: AGNITRA_RAY_EVALUATORS, else 2)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

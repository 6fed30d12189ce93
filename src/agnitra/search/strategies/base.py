"""Search strategies: propose the next recipe to measure, learn from each result.

Three methods, like Optuna's samplers: `ask()` the next candidate (None when done), `tell()` its
result, and a name. Exhaustive enumeration lives here now; TPE, NSGA-II, PPO and the cost model
come as new files beside this one.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from agnitra.search.space import Candidate

STRATEGIES: dict[str, type["Strategy"]] = {}


class Strategy(abc.ABC):
    name: str = ""

    def __init__(self, space: list[Candidate]) -> None:
        self.space = list(space)
        self.seconds_left: float | None = None

    @abc.abstractmethod
    def ask(self) -> Candidate | None:
        """The next candidate to measure, or None when the strategy has nothing left."""

    def tell(self, candidate: Candidate, result: Any) -> None:
        """The measured result of a candidate (status, speedup, correctness)."""

    def attach(self, context: SearchContext) -> list[str]:
        """What the run knows about the workload (its features, the store), before the first
        ask; returns notes for the report. Strategies that learn from the store use it."""
        return []

    def predicted(self, candidate: Candidate) -> dict | None:
        """What the strategy expected of a candidate (its cost model's prediction), if anything."""
        return None

    def time_left(self, seconds: float | None) -> None:
        """A hint before each ask: the seconds the next candidate may take before it is stopped
        (None: not known). Strategies that predict a candidate's time use it."""
        self.seconds_left = seconds

    def stop_note(self) -> str:
        """Why the strategy stopped before its space was spent ('' if it did not): the report says it."""
        return ""

    def learned_notes(self) -> list[str]:
        """What the strategy learned in this run that changed its order (the report says it)."""
        return []

    def learned_from_store(self) -> bool:
        """Whether the strategy's own order already comes from the store's measurements (a
        trained cost model): then the recommended recipes need not go first."""
        return False


@dataclass
class SearchContext:
    """The searched workload as the cost model sees it: a dataset row without a recipe (device
    kind, batch, source, family, `sig.*` and `dev.*` features), and where its measurements go."""

    workload_row: dict[str, Any] = field(default_factory=dict)
    store_url: str | None = None  # None: the configured store
    advised: list[Candidate] = field(default_factory=list)  # the advisor's valid recipes (`llm` measures them first)
    objective: str = "latency"  # the run's --objective: what the agent's reward weighs
    baseline_model_bytes: int | None = None  # the original model's weights and buffers: a candidate's memory ratio


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    STRATEGIES[cls.name] = cls
    return cls


def get_strategy(name: str) -> type[Strategy]:
    import agnitra.search.strategies  # noqa: F401

    from agnitra.errors import UserError

    if name not in STRATEGIES:
        raise UserError(f"unknown search strategy '{name}'; available: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]

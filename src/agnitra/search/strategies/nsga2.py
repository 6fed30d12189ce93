"""`nsga2`: Optuna's NSGA-II over the recipe space (`optuna_base`), with three objectives at once:
speed (log speedup, up), the model's own memory (log bytes, down) and quality error (down: the
relative error, 1 - cosine or top-1 agreement, the perplexity rise, or SQNR's noise share).
The run's Pareto front over latency, memory and error is what it serves; a failed candidate is
told as the worst on every objective."""

from __future__ import annotations

import math
from typing import Any

from agnitra.results import WORST_ERROR
from agnitra.results import quality_error as error_of
from agnitra.search.strategies.base import register_strategy
from agnitra.search.strategies.optuna_base import OptunaStrategy, correct, log_speedup

POPULATION = 8


@register_strategy
class NSGA2(OptunaStrategy):
    name = "nsga2"
    directions = ("maximize", "minimize", "minimize")

    def sampler(self, seed: int):
        import optuna

        return optuna.samplers.NSGAIISampler(seed=seed, population_size=POPULATION)

    def values(self, result: Any) -> list[float]:
        memory = getattr(result, "model_bytes", None) or getattr(result, "peak_memory_bytes", None)
        if not correct(result):
            return [log_speedup(result), math.log(memory) if memory else 60.0, WORST_ERROR]
        return [log_speedup(result), math.log(memory) if memory else 60.0, quality_error(getattr(result, "correctness", None))]


def quality_error(check: Any) -> float:
    """A check's value as an error to minimise (`results.quality_error`)."""
    return 0.0 if check is None else error_of(check.metric, check.value)

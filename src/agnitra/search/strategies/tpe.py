"""`tpe`: Optuna's Tree-structured Parzen Estimator over the recipe space (`optuna_base`), told
the log of each candidate's speedup (a failure, timeout or failed verification as a large loss),
so later proposals lean towards the transforms and settings that paid."""

from __future__ import annotations

from typing import Any

from agnitra.search.strategies.base import register_strategy
from agnitra.search.strategies.optuna_base import OptunaStrategy, log_speedup

STARTUP_TRIALS = 4  # random proposals before TPE models the results


@register_strategy
class TPE(OptunaStrategy):
    name = "tpe"

    def sampler(self, seed: int):
        import optuna

        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS, multivariate=True, warn_independent_sampling=False)

    def values(self, result: Any) -> list[float]:
        return [log_speedup(result)]

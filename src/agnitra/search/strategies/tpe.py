"""`tpe`: Optuna's Tree-structured Parzen Estimator over the recipe space.

A recipe is read as one categorical choice per transform: which of its parameter settings the
recipe uses, or none. TPE proposes a combination; a combination the space holds (the space's
pruning rules and conflicts decide which exist) is measured and its outcome told back as the log
of its speedup (a failure, timeout or failed verification as a large loss), so later proposals
lean towards the transforms and settings that paid. A combination the space does not hold is
told back as pruned and another is asked for; after a bounded number of misses the best-prior
candidate not yet measured is taken, so the search always moves on.
"""

from __future__ import annotations

import math
from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy, register_strategy
from agnitra.search.strategies.blocking import FailedSteps

NONE = "-"
FAILED_VALUE = -2.0  # log speedup told for a candidate that did not give a correct measurement
MISSES_PER_ASK = 32  # proposals outside the space before falling back to the best prior
STARTUP_TRIALS = 4  # random proposals before TPE models the results


@register_strategy
class TPE(Strategy):
    name = "tpe"

    def __init__(self, space: list[Candidate], seed: int = 0) -> None:
        import optuna

        super().__init__(space)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.dimensions = _dimensions(self.space)
        self.by_choice = {_choice(c, self.dimensions): c for c in self.space}
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS, multivariate=True, warn_independent_sampling=False)
        self.study = optuna.create_study(direction="maximize", sampler=sampler)
        self.asked: set[str] = set()
        self.trials: dict[str, Any] = {}  # recipe key -> its open Optuna trial
        self.failed = FailedSteps()

    def ask(self) -> Candidate | None:
        from optuna.trial import TrialState

        if not self._open():
            return None
        for _ in range(MISSES_PER_ASK):
            trial = self.study.ask()
            choice = tuple(trial.suggest_categorical(name, options) for name, options in self.dimensions.items())
            candidate = self.by_choice.get(choice)
            if candidate is not None and candidate.recipe.key() not in self.asked and self.failed.allows(candidate):
                self.trials[candidate.recipe.key()] = trial
                return self._take(candidate)
            self.study.tell(trial, state=TrialState.PRUNED)
        return self._take(self._open()[0])

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.failed.learn(candidate, result)
        trial = self.trials.pop(candidate.recipe.key(), None)
        if trial is not None:
            self.study.tell(trial, _value(result))

    def _open(self) -> list[Candidate]:
        return [c for c in self.space if c.recipe.key() not in self.asked and self.failed.allows(c)]

    def _take(self, candidate: Candidate) -> Candidate:
        self.asked.add(candidate.recipe.key())
        return candidate


def _dimensions(space: list[Candidate]) -> dict[str, list[str]]:
    """Per transform (in first-seen order), its step labels in the space, plus none."""
    options: dict[str, list[str]] = {}
    for candidate in space:
        for step in candidate.recipe.steps:
            labels = options.setdefault(step.transform, [NONE])
            if step.label() not in labels:
                labels.append(step.label())
    return options


def _choice(candidate: Candidate, dimensions: dict[str, list[str]]) -> tuple[str, ...]:
    used = {step.transform: step.label() for step in candidate.recipe.steps}
    return tuple(used.get(name, NONE) for name in dimensions)


def _value(result: Any) -> float:
    speedup = getattr(result, "speedup", None)
    if getattr(result, "status", "ok") != "ok" or not getattr(result, "passed", True) or not speedup or speedup <= 0:
        return FAILED_VALUE
    return math.log(speedup)

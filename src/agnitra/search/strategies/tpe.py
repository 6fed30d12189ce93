"""`tpe`: Optuna's Tree-structured Parzen Estimator over the recipe space.

A recipe is read as one categorical choice per transform: which of its parameter settings the
recipe uses, or none. TPE proposes a combination; the candidate measured is the one of the space
(not measured yet, not blocked by a failure) that agrees with it on the most transforms, the
transforms' priors breaking ties, since the space's pruning rules and conflicts leave out most
combinations. What was measured is told back as a completed trial of that candidate's own
choices, valued by the log of its speedup (a failure, timeout or failed verification as a large
loss), so later proposals lean towards the transforms and settings that paid. The proposal
itself is closed as failed, which TPE does not learn from: one proposal and one result per
candidate, so asking stays cheap.
"""

from __future__ import annotations

import math
from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy, register_strategy
from agnitra.search.strategies.blocking import FailedSteps

NONE = "-"
FAILED_VALUE = -2.0  # log speedup told for a candidate that did not give a correct measurement
STARTUP_TRIALS = 4  # random proposals before TPE models the results


@register_strategy
class TPE(Strategy):
    name = "tpe"

    def __init__(self, space: list[Candidate], seed: int = 0) -> None:
        import optuna

        super().__init__(space)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.dimensions = _dimensions(self.space)
        self.distributions = {name: optuna.distributions.CategoricalDistribution(options) for name, options in self.dimensions.items()}
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS, multivariate=True, warn_independent_sampling=False)
        self.study = optuna.create_study(direction="maximize", sampler=sampler)
        self.asked: set[str] = set()
        self.failed = FailedSteps()

    def ask(self) -> Candidate | None:
        from optuna.trial import TrialState

        open_candidates = [c for c in self.space if c.recipe.key() not in self.asked and self.failed.allows(c)]
        if not open_candidates:
            return None
        trial = self.study.ask(self.distributions)
        proposal = tuple(trial.params[name] for name in self.dimensions)
        self.study.tell(trial, state=TrialState.FAIL)
        agreement = lambda c: sum(a == b for a, b in zip(_choice(c, self.dimensions), proposal))  # noqa: E731
        candidate = max(open_candidates, key=agreement)  # the first of equals: the best prior
        self.asked.add(candidate.recipe.key())
        return candidate

    def tell(self, candidate: Candidate, result: Any) -> None:
        import optuna

        self.failed.learn(candidate, result)
        params = dict(zip(self.dimensions, _choice(candidate, self.dimensions)))
        self.study.add_trial(optuna.trial.create_trial(params=params, distributions=self.distributions, value=_value(result)))


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

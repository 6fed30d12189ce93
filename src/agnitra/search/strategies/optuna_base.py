"""What the Optuna-backed strategies share: the recipe space read as one categorical choice per
transform (its setting in the recipe, or none), an Optuna sampler proposing combinations, and the
space's candidate that agrees with a proposal on the most transforms measured in its place (the
transforms' priors break ties), since the space's pruning rules and conflicts leave out most
combinations. A proposal is closed as failed, which Optuna's samplers do not learn from; what was
measured is added as a completed trial of that candidate's own choices. One proposal and one
result per candidate, so asking stays cheap."""

from __future__ import annotations

import math
from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy
from agnitra.search.strategies.blocking import FailedSteps

NONE = "-"
FAILED_LOG_SPEEDUP = -2.0  # told for a candidate that did not give a correct measurement


class OptunaStrategy(Strategy):
    directions: tuple[str, ...] = ("maximize",)

    def __init__(self, space: list[Candidate], seed: int = 0) -> None:
        import optuna

        super().__init__(space)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.dimensions = _dimensions(self.space)
        self.distributions = {name: optuna.distributions.CategoricalDistribution(options) for name, options in self.dimensions.items()}
        self.study = optuna.create_study(directions=list(self.directions), sampler=self.sampler(seed))
        self.asked: set[str] = set()
        self.failed = FailedSteps()

    def sampler(self, seed: int):
        raise NotImplementedError

    def values(self, result: Any) -> list[float]:
        """The objective values of a measured candidate, one per direction."""
        raise NotImplementedError

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
        self.study.add_trial(optuna.trial.create_trial(params=params, distributions=self.distributions, values=self.values(result)))


def log_speedup(result: Any) -> float:
    speedup = getattr(result, "speedup", None)
    if not correct(result) or not speedup or speedup <= 0:
        return FAILED_LOG_SPEEDUP
    return math.log(speedup)


def correct(result: Any) -> bool:
    return getattr(result, "status", "ok") == "ok" and bool(getattr(result, "passed", True))


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

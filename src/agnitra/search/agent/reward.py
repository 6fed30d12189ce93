"""The episode's reward and the workload an episode is played on.

Reward, at the end only: `alpha*(T_base - T)/T_base + beta*(M_base - M)/M_base - penalty*(1 - P(pass))`,
T and M predicted by the cost model (`CostModel.predict_recipes`: the log speedup gives T/T_base,
the memory ratio M/M_base, absent where the model has no memory rows) or measured. alpha and beta
come from the device: one under MEMORY_POOR_BYTES weighs memory more; both can be set. The run's
objective moves them: `memory` weighs memory first (MEMORY_FIRST); latency, throughput and energy
(time at the device's power) keep the device's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from agnitra.search.agent.parts import ABSENT, Layout, Reach
from agnitra.search.agent.state import StateSpec
from agnitra.search.costmodel.model import PRIOR_STD, Prediction

MEMORY_POOR_BYTES = 16 * 2**30
SPEED_FIRST = (0.9, 0.1)  # (alpha, beta) of a device with memory to spare
MEMORY_POOR = (0.6, 0.4)
MEMORY_FIRST = (0.2, 0.8)  # the `memory` objective's
PENALTY = 1.0
LOSSLESS_PASS = 0.99  # a recipe without a lossy step fails verification only by a bug
BASELINE = Prediction(0.0, 0.0, 1.0, 1.0)  # the empty recipe: the original model


@dataclass(frozen=True)
class Weights:
    alpha: float
    beta: float
    penalty: float = PENALTY

    @classmethod
    def for_device(cls, row: dict, alpha: float | None = None, beta: float | None = None, penalty: float | None = None) -> "Weights":
        memory = row.get("dev.memory_bytes")
        poor = isinstance(memory, (int, float)) and 0 < memory < MEMORY_POOR_BYTES
        a, b = MEMORY_POOR if poor else SPEED_FIRST
        return cls(a if alpha is None else alpha, b if beta is None else beta, PENALTY if penalty is None else penalty)

    @classmethod
    def for_objective(cls, row: dict, objective: str | None, default: "Weights | None" = None) -> "Weights":
        """Memory's first where the run's objective is memory; else `default` (a saved policy's
        own), or the device's."""
        if objective == "memory":
            return cls(*MEMORY_FIRST)
        return default if default is not None else cls.for_device(row)

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "beta": self.beta, "penalty": self.penalty}


def reward(p: Prediction, w: Weights) -> float:
    memory = 0.0 if p.memory_ratio is None else 1.0 - p.memory_ratio
    return w.alpha * (1.0 - math.exp(-p.log_speedup)) + w.beta * memory - w.penalty * (1.0 - p.p_pass)


def measured_reward(speedup: float | None, passed: bool, memory_ratio: float | None, w: Weights) -> float | None:
    """The reward of a measurement (None where it was not timed): pass is 1 or 0."""
    if not speedup or speedup <= 0:
        return None
    return reward(Prediction(math.log(speedup), 0.0, 1.0 if passed else 0.0, memory_ratio), w)


class PriorPredictor:
    """Predictions from the transforms' priors where no cost model trains: the speedup is the
    product of the steps' priors; a recipe with a lossy step passes half the time, one without
    LOSSLESS_PASS of the time."""

    def __init__(self, space) -> None:
        from agnitra.search.agent.parts import candidate_steps, step_key

        self.prior = {tuple(step_key(s) for s in candidate_steps(c)): c.prior for c in space}
        self.single = {keys[0]: p for keys, p in self.prior.items() if len(keys) == 1}

    def predict_recipes(self, row: dict, recipes: list[list[dict]]) -> list[Prediction]:
        from agnitra.search.agent.parts import step_key
        from agnitra.transforms.recipe import Recipe, Step

        out = []
        for steps in recipes:
            keys = tuple(step_key(s) for s in steps)
            prior = self.prior.get(keys) or math.prod(self.single.get(k, 1.0) for k in keys)
            lossy = Recipe(tuple(Step(s["transform"], s["params"]) for s in steps)).lossy
            out.append(Prediction(math.log(max(prior, 1e-6)), PRIOR_STD, 0.5 if lossy else LOSSLESS_PASS))
        return out


@dataclass
class Scene:
    """One workload an episode is played on: its row, its space in the layout, its features, and
    the predictions of every recipe asked (cached; `measured` rewards take their place)."""

    row: dict
    reach: Reach
    features: np.ndarray
    weights: Weights
    predictor: object  # `predict_recipes(row, recipes) -> list[Prediction]`: a CostModel or PriorPredictor
    predictions: dict[tuple[int, ...], Prediction] = field(default_factory=dict)
    measured: dict[tuple[int, ...], float] = field(default_factory=dict)

    @classmethod
    def of(cls, row: dict, reach: Reach, spec: StateSpec, weights: Weights, predictor) -> "Scene":
        return cls(row, reach, spec.features(row, reach), weights, predictor)

    @property
    def layout(self) -> Layout:
        return self.reach.layout

    def predict(self, many: list[tuple[int, ...]]) -> list[Prediction]:
        todo = [a for a in dict.fromkeys(many) if a not in self.predictions and any(a)]
        if todo:
            for actions, p in zip(todo, self.predictor.predict_recipes(self.row, [self.layout.decode(a) for a in todo])):
                self.predictions[actions] = p
        return [self.predictions.get(a, BASELINE) for a in many]

    def precompute(self) -> None:
        """Every recipe of the space predicted in one call (a search's whole space: one batch)."""
        self.predict(list(self.reach.candidates))

    def reward(self, actions: tuple[int, ...]) -> float:
        if actions in self.measured:
            return self.measured[actions]
        return reward(self.predict([actions])[0], self.weights)


@dataclass
class ChoiceEffect:
    """One part of an agent's recipe: its choice and what the cost model expects it to add (the
    recipe against the same recipe without it)."""

    dimension: str
    choice: str
    speedup_factor: float
    reward_gain: float

    def to_dict(self) -> dict:
        return {"dimension": self.dimension, "choice": self.choice, "speedup_factor": round(self.speedup_factor, 4), "reward_gain": round(self.reward_gain, 4)}


def choice_effects(scene: Scene, actions: tuple[int, ...]) -> list[ChoiceEffect]:
    without = [actions[:i] + (ABSENT,) + actions[i + 1:] for i, a in enumerate(actions) if a != ABSENT]
    full, *rest = scene.predict([actions, *without])
    effects, chosen = [], [i for i, a in enumerate(actions) if a != ABSENT]
    for i, p in zip(chosen, rest):
        effects.append(ChoiceEffect(scene.layout.dimensions[i].transform, scene.layout.label(i, actions[i]), math.exp(full.log_speedup - p.log_speedup),
                                    reward(full, scene.weights) - reward(p, scene.weights)))
    return effects

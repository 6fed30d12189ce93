"""The parts an episode walks: one dimension per transform, in the order a recipe applies them
(module transforms by `order`, then runtime transforms by theirs, then a backend). Each step of an
episode picks one choice of its dimension or leaves it absent (action 0).

Today's transforms apply model-wide, so a part is a dimension of the recipe space, not a layer or
hotspot of the graph: a per-hotspot choice is not expressible until a transform takes a scope.

A `Layout` is the vocabulary of a policy (every choice it may pick, as step keys); `Reach` is one
workload's space in it: which next actions lead to a recipe of the space (exclusive groups, the
conflicts and the limits on transforms a recipe, all read off the space's own candidates).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from agnitra.search.space import Candidate

ABSENT = 0  # the action that leaves a dimension out of the recipe
STAGE_RANK = {"module": 0, "runtime": 1, "backend": 2}


def step_key(step: dict) -> str:
    """A step's identity: its transform and every parameter, as JSON."""
    return json.dumps({"transform": step["transform"], "params": step.get("params") or {}}, sort_keys=True)


def candidate_steps(candidate: Candidate) -> list[dict]:
    return candidate.recipe.to_dict()["steps"]


def candidate_of(steps: list[dict], prior: float = 1.0) -> Candidate:
    """A candidate of recipe steps as a dataset row holds them."""
    from agnitra.transforms.recipe import Recipe, Step

    return Candidate(Recipe(tuple(Step(s["transform"], dict(s.get("params") or {})) for s in steps)), prior)


@dataclass(frozen=True)
class Dimension:
    transform: str
    choices: tuple[str, ...]  # step keys; action k picks choices[k - 1]


@dataclass
class Layout:
    dimensions: list[Dimension]

    @classmethod
    def from_recipes(cls, recipes: Iterable[list[dict]], start: "Layout | None" = None) -> "Layout":
        """Every step the recipes hold, one dimension per registered transform in recipe order
        (steps of transforms not registered here are left out). With `start`, its choices keep
        their places (a fine-tuned policy's actions mean what they meant) and new ones follow."""
        from agnitra.transforms.base import TRANSFORMS, all_transforms

        registered = {t.name: i for i, t in enumerate(all_transforms())}
        choices: dict[str, dict[str, None]] = {d.transform: dict.fromkeys(d.choices) for d in (start.dimensions if start else []) if d.transform in registered}
        for steps in recipes:
            for step in steps:
                if step.get("transform") in registered:
                    choices.setdefault(step["transform"], {}).setdefault(step_key(step), None)

        def rank(name: str) -> tuple:
            t = TRANSFORMS[name]
            return STAGE_RANK.get(t.stage, 1), t.order if t.stage != "backend" else 0, registered[name]

        return cls([Dimension(name, tuple(choices[name])) for name in sorted(choices, key=rank)])

    @property
    def actions(self) -> int:
        """The size of the action space: absent, or the most choices a dimension has."""
        return 1 + max((len(d.choices) for d in self.dimensions), default=0)

    def encode(self, steps: list[dict]) -> tuple[int, ...] | None:
        """A recipe as one action per dimension; None where a step is outside the vocabulary."""
        where = {d.transform: i for i, d in enumerate(self.dimensions)}
        actions = [ABSENT] * len(self.dimensions)
        for step in steps:
            i = where.get(step.get("transform"))
            key = step_key(step) if i is not None else None
            if i is None or key not in self.dimensions[i].choices or actions[i] != ABSENT:
                return None
            actions[i] = 1 + self.dimensions[i].choices.index(key)
        return tuple(actions)

    def decode(self, actions: Iterable[int]) -> list[dict]:
        """The recipe's steps for one action per dimension, in recipe order."""
        return [json.loads(d.choices[a - 1]) for d, a in zip(self.dimensions, actions) if a != ABSENT]

    def label(self, dimension: int, action: int) -> str:
        from agnitra.transforms.recipe import Step

        if action == ABSENT:
            return f"{self.dimensions[dimension].transform}: absent"
        step = json.loads(self.dimensions[dimension].choices[action - 1])
        return Step(step["transform"], step["params"]).label()

    def to_dict(self) -> dict:
        return {"dimensions": [{"transform": d.transform, "choices": list(d.choices)} for d in self.dimensions]}

    @classmethod
    def from_dict(cls, doc: dict) -> "Layout":
        return cls([Dimension(str(d["transform"]), tuple(str(c) for c in d["choices"])) for d in doc["dimensions"]])


@dataclass
class Reach:
    """One workload's space in a layout: the candidate at each full action tuple, and the valid
    next actions after each prefix."""

    layout: Layout
    candidates: dict[tuple[int, ...], Candidate] = field(default_factory=dict)
    nexts: dict[tuple[int, ...], set[int]] = field(default_factory=dict)
    outside: int = 0  # candidates with a step the layout does not hold (the policy cannot pick them)

    @classmethod
    def of(cls, layout: Layout, space: list[Candidate]) -> "Reach":
        reach = cls(layout)
        for candidate in space:
            actions = layout.encode(candidate_steps(candidate))
            if actions is None or not any(actions):
                reach.outside += actions is None
                continue
            reach.candidates.setdefault(actions, candidate)
            for i in range(len(actions)):
                reach.nexts.setdefault(actions[:i], set()).add(actions[i])
        return reach

    def available(self) -> list[bool]:
        """For each dimension, whether some recipe of the space has a choice of it."""
        return [any(a[i] for a in self.candidates) for i in range(len(self.layout.dimensions))]

    def mask(self, prefix: tuple[int, ...]) -> list[bool]:
        valid = self.nexts.get(prefix, set())
        return [a in valid for a in range(self.layout.actions)]

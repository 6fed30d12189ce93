"""The recipe space: which transform combinations are worth measuring here, most promising first.

Generic: every registered transform says what it offers (`choices()` on this workload and device,
each with a prior), where it goes in a recipe (`order`), which op kinds of the captured graph it
changes (`acts_on`), which group it excludes (`exclusive`) and why it cannot share a recipe with
others (`conflict()`); this module knows no transform by name.

Each transform is one dimension of the space: absent, or one of its choices that apply. Each
choice is checked once (`check()` on this context; the reasons of those that do not apply are
returned), since a step's check depends on the context alone; combinations are then composed
without checking again: up to `max_module_transforms` module transforms (at most one of each
exclusive group), then up to `max_runtime_transforms` runtime transforms (each in its `order`, so
an outer wrapper sees what the inner ones built), or one backend instead; a combination is kept
unless a step's `conflict()` names a reason. Each recipe is ranked by the product of its choices'
priors and its steps' `prior_factor()`; the learned cost model of a later stage replaces these
priors. `space_size()` says how many choices each dimension has and how many recipes they make.

Size: a Llama-style decoder on a Hopper GPU has ~10^4 recipes (weight formats and mixed-precision
policies x projection stacking x the Triton kernels x compile's modes and options); building them
takes about a second. Strategies take the space as a list, so `limit` caps it (default 200,000,
about 0.2 GB of candidates): beyond it the recipes of lowest prior are left out, and said so in
the skipped list.
"""

from __future__ import annotations

import gc
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

from agnitra.errors import NotApplicable
from agnitra.transforms.base import Choice, Transform, TransformContext, all_transforms, get_transform
from agnitra.transforms.patcher import check_recipe
from agnitra.transforms.recipe import Recipe, Step

__all__ = ["Candidate", "Choice", "SpaceSize", "Skipped", "recipe_space", "space_size"]

DEFAULT_LIMIT = 200_000  # candidates a strategy is handed at most (see the module's docstring)


@dataclass(frozen=True)
class Candidate:
    recipe: Recipe
    prior: float  # expected speedup over the baseline, from the transforms' priors


@dataclass
class Skipped:
    transform: str
    reason: str


@dataclass
class SpaceSize:
    """How large the space is here: each dimension's applicable choices, the grid they span
    (each transform absent or one of its choices), and the recipes left once stages, exclusive
    groups, the limits on transforms a recipe and conflicts are applied."""

    dimensions: dict[str, int]  # transform -> applicable choices
    grid: int  # product over the dimensions of (1 + choices), the empty recipe included
    points: int  # recipes in the space (the baseline not counted)
    skipped: list[Skipped] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"dimensions": dict(self.dimensions), "grid": self.grid, "points": self.points, "skipped": len(self.skipped)}


@dataclass(frozen=True)
class _Option:
    """One applicable choice, with what composing it needs computed once."""

    choice: Choice
    step: Step
    params: Any
    transform: Transform
    label: str
    conflicts: bool  # the transform has its own conflict()
    factors: bool  # the transform has its own prior_factor()


def recipe_space(ctx: TransformContext, allowed: set[str] | None = None, max_module_transforms: int = 3,
                 max_runtime_transforms: int = 2, limit: int | None = DEFAULT_LIMIT) -> tuple[list[Candidate], list[Skipped]]:
    """Applicable recipes, best prior first, and why each transform or choice left out does not
    apply (and how many recipes `limit` left out, where it did)."""
    dims, skipped = _dimensions(ctx, allowed)
    collecting = gc.isenabled()
    gc.disable()  # tens of thousands of small tuples, none of them garbage: the collector's passes only cost time
    try:
        ranked = []
        for combo in _combinations(dims, max_module_transforms, max_runtime_transforms):
            prior = _prior_if_composable(combo, ctx)
            if prior is not None:
                ranked.append((-prior, len(combo), " + ".join(o.label for o in combo), combo))
        if limit is not None and len(ranked) > limit:
            skipped.append(Skipped("space", f"{len(ranked) - limit} recipes of lowest prior left out: the space is limited to {limit} recipes (limit=)"))
        ranked.sort(key=lambda r: r[:3])
        candidates = [Candidate(Recipe(tuple(o.step for o in combo)), -neg) for neg, _, _, combo in ranked[:limit]]
    finally:
        if collecting:
            gc.enable()
    return candidates, skipped


def space_size(ctx: TransformContext, allowed: set[str] | None = None, max_module_transforms: int = 3, max_runtime_transforms: int = 2) -> SpaceSize:
    """The space's size per dimension and in all, counted as `recipe_space` builds it."""
    dims, skipped = _dimensions(ctx, allowed)
    points = sum(1 for combo in _combinations(dims, max_module_transforms, max_runtime_transforms) if _prior_if_composable(combo, ctx) is not None)
    return SpaceSize({name: len(options) for name, options in dims.items()}, math.prod(1 + len(o) for o in dims.values()), points, skipped)


def _dimensions(ctx: TransformContext, allowed: set[str] | None) -> tuple[dict[str, list[_Option]], list[Skipped]]:
    """Each transform's applicable choices (checked once each, duplicates dropped), in registration order."""
    skipped: list[Skipped] = []
    dims: dict[str, list[_Option]] = {}
    for transform in all_transforms():
        if allowed is not None and transform.name not in allowed:
            continue
        missing = _missing_ops(transform, ctx)
        if missing:
            skipped.append(Skipped(transform.name, missing))
            continue
        options, seen = [], set()
        for choice in _applicable(transform.choices(ctx), ctx, skipped):
            step = choice.step()
            key = Recipe((step,)).key()
            if key in seen:
                continue
            seen.add(key)
            own = type(transform)
            options.append(_Option(choice, step, transform.parse_params(step.params), transform, step.label(),
                                   own.conflict is not Transform.conflict, own.prior_factor is not Transform.prior_factor))
        if options:
            dims[transform.name] = options
    return dims, skipped


def _combinations(dims: dict[str, list[_Option]], max_module: int, max_runtime: int) -> Iterator[tuple[_Option, ...]]:
    """Every combination of the stage rules, before conflicts: module transforms (one of each
    exclusive group) in their order, then runtime transforms in theirs, or one backend."""
    by_stage: dict[str, list[str]] = {"module": [], "runtime": [], "backend": []}
    for name in dims:
        by_stage[get_transform(name).stage].append(name)
    for stage in ("module", "runtime"):
        by_stage[stage].sort(key=lambda n: get_transform(n).order)  # stable: registration order among equals
    tails: list[tuple[_Option, ...]] = [()]
    tails += _products(dims, by_stage["runtime"], max_runtime, 1)
    tails += [(o,) for name in by_stage["backend"] for o in dims[name]]
    for head in _products(dims, by_stage["module"], max_module, 0):
        for tail in tails:
            if head or tail:
                yield head + tail


def _products(dims: dict[str, list[_Option]], names: list[str], most: int, least: int) -> list[tuple[_Option, ...]]:
    out = []
    for k in range(least, min(most, len(names)) + 1):
        for subset in itertools.combinations(names, k):
            groups = [get_transform(n).exclusive for n in subset if get_transform(n).exclusive]
            if len(groups) != len(set(groups)):
                continue
            out.extend(itertools.product(*(dims[n] for n in subset)))
    return out


def _prior_if_composable(combo: tuple[_Option, ...], ctx: TransformContext) -> float | None:
    """The combination's prior, or None where a step's conflict() refuses the others."""
    steps = [o.step for o in combo]
    prior = 1.0
    for i, option in enumerate(combo):
        others = steps[:i] + steps[i + 1:] if (option.conflicts or option.factors) else steps
        if option.conflicts and option.transform.conflict(option.params, others, ctx):
            return None
        prior *= option.choice.prior
        if option.factors:
            prior *= option.transform.prior_factor(option.params, others, ctx)
    return prior


def _missing_ops(transform, ctx: TransformContext) -> str:
    """Why the captured graph gives the transform nothing to change ('' where it may)."""
    if ctx.op_kinds is None or not transform.acts_on or transform.acts_on & ctx.op_kinds:
        return ""
    return f"the captured graph has no {' or '.join(sorted(transform.acts_on))} operations for it to change"


def _applicable(choices: list[Choice], ctx: TransformContext, skipped: list[Skipped]) -> list[Choice]:
    kept = []
    for choice in choices:
        try:
            check_recipe(Recipe((choice.step(),)), ctx)
            kept.append(choice)
        except NotApplicable as exc:
            skipped.append(Skipped(choice.label(), str(exc)))
    return kept

"""The recipe space: which transform combinations are worth measuring here, most promising first.

Generic: every registered transform says what it offers (`choices()` on this workload and device,
each with a prior), where it goes in a recipe (`order`), which op kinds of the captured graph it
changes (`acts_on`), which group it excludes (`exclusive`) and why it cannot share a recipe with
others (`conflict()`); this module knows no transform by name. The space keeps the choices that
apply (each one's `check()`), combines them stage by stage (up to two module transforms, then one
runtime transform, or one backend instead) and ranks each recipe by the product of its priors and
its steps' `prior_factor()`; the learned cost model of a later stage replaces these priors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from agnitra.errors import NotApplicable
from agnitra.transforms.base import Choice, TransformContext, all_transforms, get_transform
from agnitra.transforms.patcher import check_recipe
from agnitra.transforms.recipe import Recipe, Step

__all__ = ["Candidate", "Choice", "Skipped", "recipe_space"]


@dataclass(frozen=True)
class Candidate:
    recipe: Recipe
    prior: float  # expected speedup over the baseline, from the transforms' priors


@dataclass
class Skipped:
    transform: str
    reason: str


def recipe_space(ctx: TransformContext, allowed: set[str] | None = None, max_module_transforms: int = 2) -> tuple[list[Candidate], list[Skipped]]:
    """Applicable recipes, best prior first, and why each transform that was left out does not apply."""
    skipped: list[Skipped] = []
    by_stage: dict[str, list[Choice]] = {"module": [], "runtime": [], "backend": []}
    for transform in all_transforms():
        if allowed is not None and transform.name not in allowed:
            continue
        missing = _missing_ops(transform, ctx)
        if missing:
            skipped.append(Skipped(transform.name, missing))
            continue
        by_stage[transform.stage] += _applicable(transform.choices(ctx), ctx, skipped)
    modules = sorted(by_stage["module"], key=lambda c: get_transform(c.transform).order)  # stable: each transform's own order kept
    candidates: dict[str, Candidate] = {}
    for k in range(0, max_module_transforms + 1):
        for combo in itertools.combinations(modules, k):
            for tail in [()] + [(r,) for r in by_stage["runtime"]] + [(b,) for b in by_stage["backend"]]:
                chosen = [*combo, *tail]
                candidate = _candidate(chosen, ctx) if chosen else None
                if candidate is not None:
                    candidates.setdefault(candidate.recipe.key(), candidate)
    ranked = sorted(candidates.values(), key=lambda c: (-c.prior, len(c.recipe.steps), c.recipe.name))
    return ranked, skipped


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


def _candidate(chosen: list[Choice], ctx: TransformContext) -> Candidate | None:
    """The recipe of these choices with its prior, or None where they cannot compose."""
    steps = [c.step() for c in chosen]
    if _conflict(steps, ctx):
        return None
    recipe = Recipe(tuple(steps))
    try:
        check_recipe(recipe, ctx)  # the combination as a whole (e.g. fp16 then ONNX Runtime)
    except NotApplicable:
        return None
    prior = 1.0
    for choice, step in zip(chosen, steps):
        transform = get_transform(step.transform)
        prior *= choice.prior * transform.prior_factor(transform.parse_params(step.params), _others(steps, step), ctx)
    return Candidate(recipe, prior)


def _conflict(steps: list[Step], ctx: TransformContext) -> str | None:
    """Why these steps cannot share a recipe: a transform twice, two of one exclusive group, or
    what a step's own `conflict()` says of the others."""
    names = [s.transform for s in steps]
    if len(names) != len(set(names)):
        return "a transform twice"
    groups = [get_transform(n).exclusive for n in names if get_transform(n).exclusive]
    if len(groups) != len(set(groups)):
        return f"two transforms of the group {groups[0]!r}"
    for step in steps:
        transform = get_transform(step.transform)
        reason = transform.conflict(transform.parse_params(step.params), _others(steps, step), ctx)
        if reason:
            return reason
    return None


def _others(steps: list[Step], step: Step) -> list[Step]:
    return [s for s in steps if s is not step]

"""The advisor's reply read and each proposed recipe judged: only a recipe of this run's space is
measured, so the advisor can reorder the search but never make it run anything it would not.

A recipe is rejected, with the reason, where a step carries anything but a transform and its
parameters or an over-long value (unsafe), names an unknown transform or a bad parameter (the
registry's allow-listed reading, `Recipe.from_dict`), uses a transform this run does not search or
one that does not apply here, or is not in the space (a choice not searched, a conflict).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from agnitra.errors import NotApplicable, UserError, first_line
from agnitra.search.space import Candidate, Skipped
from agnitra.transforms.base import TransformContext, get_transform
from agnitra.transforms.patcher import check_recipe
from agnitra.transforms.recipe import RECIPE_VERSION, Recipe, Step

MAX_PROPOSALS = 8  # read from a reply; the rest are rejected unread
MAX_STEPS = 6
MAX_VALUE_CHARS = 200  # a parameter value longer than this is refused unread
STEP_KEYS = {"transform", "params"}
FENCED = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)


@dataclass
class Proposal:
    recipe: str  # its label (the space's order), or the proposal as written where it could not be read
    rationale: str
    reason: str = ""  # why it was rejected ('' where it is valid)
    candidate: Candidate | None = None  # the space's candidate it is (None: rejected)


def read_reply(content: str) -> tuple[list, str]:
    """The proposed recipes in a reply's text (a JSON object with a list "recipes", or a list, in a
    Markdown fence or not), or why the reply is malformed."""
    text = content.strip()
    fenced = FENCED.fullmatch(text)
    try:
        doc = json.loads(fenced.group(1) if fenced else text)
    except json.JSONDecodeError as exc:
        return [], f"malformed reply: not JSON ({exc.msg} at character {exc.pos}: {text[:40]!r})"
    recipes = doc.get("recipes") if isinstance(doc, dict) else doc
    if not isinstance(recipes, list):
        return [], 'malformed reply: JSON without a list of recipes ({"recipes": [{"steps": [...], "rationale": ...}]})'
    return recipes, ""


def judge(raw: list, space: list[Candidate], skipped: list[Skipped], ctx: TransformContext, searched: set[str] | None) -> list[Proposal]:
    """Each proposal valid (with its candidate) or rejected (with the reason), in the reply's order."""
    read = [_read(item) for item in raw[:MAX_PROPOSALS]]
    found = _in_space(space, [recipe for _, recipe, _ in read if recipe is not None])
    singles = _singles(space)
    out: list[Proposal] = []
    seen: dict[str, int] = {}  # recipe key -> the proposal that named it first
    for i, (label, recipe, reason) in enumerate(read, 1):
        rationale = _rationale(raw[i - 1])
        if recipe is None:
            out.append(Proposal(label, rationale, reason))
            continue
        candidate = found.get(_steps_key(recipe))
        if candidate is None:
            out.append(Proposal(recipe.name, rationale, _why_not_searched(recipe, searched, skipped, ctx, singles)))
        elif candidate.recipe.key() in seen:
            out.append(Proposal(candidate.recipe.name, rationale, f"the same recipe as proposal {seen[candidate.recipe.key()]}"))
        else:
            seen[candidate.recipe.key()] = i
            out.append(Proposal(candidate.recipe.name, rationale, "", candidate))
    out += [Proposal(_written(item), _rationale(item), f"beyond the first {MAX_PROPOSALS} proposals read") for item in raw[MAX_PROPOSALS:]]
    return out


def _read(item: Any) -> tuple[str, Recipe | None, str]:
    """(label, recipe, '') or (the proposal as written, None, why it cannot be read)."""
    if not isinstance(item, dict) or not isinstance(item.get("steps"), list) or not item["steps"]:
        return _written(item), None, 'not a recipe: {"steps": [{"transform": NAME, "params": {...}}], "rationale": ...}'
    unsafe = _unsafe(item["steps"])
    if unsafe:
        return _written(item), None, f"unsafe: {unsafe}"
    try:
        recipe = Recipe.from_dict({"version": RECIPE_VERSION, "steps": item["steps"]})  # registered transforms, declared parameters
    except UserError as exc:
        return _written(item), None, str(exc)
    except Exception as exc:  # noqa: BLE001 - whatever trips the reader (a list for a name) rejects the proposal
        return _written(item), None, f"not a recipe ({first_line(exc)})"
    return recipe.name, recipe, ""


def _unsafe(steps: list) -> str:
    if len(steps) > MAX_STEPS:
        return f"{len(steps)} steps; a recipe has at most {MAX_STEPS}"
    for i, step in enumerate(steps, 1):
        if not isinstance(step, dict):
            continue  # not a step: the recipe reader says so
        extra = sorted(set(step) - STEP_KEYS)
        if extra:
            return f"step {i} asks for {', '.join(map(str, extra))[:80]}; nothing but a registered transform with its declared parameters is ever run"
        params = step.get("params")
        for key, value in (params.items() if isinstance(params, dict) else ()):
            if len(str(value)) > MAX_VALUE_CHARS:
                return f"step {i}'s parameter {str(key)[:40]} holds {len(str(value))} characters"
    return ""


def _steps_key(recipe: Recipe) -> frozenset:
    """A recipe's steps whatever their order: the space holds each combination in one order."""
    return frozenset(json.dumps([s.transform, s.params], sort_keys=True, default=str) for s in recipe.steps)


def _in_space(space: list[Candidate], recipes: list[Recipe]) -> dict[frozenset, Candidate]:
    """The space's candidate of each recipe found there, by its steps (one pass over the space)."""
    wanted = {_steps_key(r): tuple(sorted(s.transform for s in r.steps)) for r in recipes if len({s.transform for s in r.steps}) == len(r.steps)}
    names = set(wanted.values())
    found: dict[frozenset, Candidate] = {}
    for candidate in space:
        if tuple(sorted(s.transform for s in candidate.recipe.steps)) in names:
            key = _steps_key(candidate.recipe)
            if key in wanted:
                found.setdefault(key, candidate)
    return found


def _singles(space: list[Candidate]) -> dict[str, list[Step]]:
    """Each transform's choices searched here: the space's one-step recipes."""
    singles: dict[str, list[Step]] = {}
    for candidate in space:
        if len(candidate.recipe.steps) == 1:
            singles.setdefault(candidate.recipe.steps[0].transform, []).append(candidate.recipe.steps[0])
    return singles


def _why_not_searched(recipe: Recipe, searched: set[str] | None, skipped: list[Skipped], ctx: TransformContext, singles: dict[str, list[Step]]) -> str:
    """Why a well-formed recipe is not one of this run's candidates."""
    try:
        return _why_not(recipe, searched, skipped, ctx, singles)
    except Exception as exc:  # noqa: BLE001 - a transform's check or conflict that raises: not in the space all the same
        return f"not in this run's space ({first_line(exc)})"


def _why_not(recipe: Recipe, searched: set[str] | None, skipped: list[Skipped], ctx: TransformContext, singles: dict[str, list[Step]]) -> str:
    left_out = {s.transform: s.reason for s in skipped}
    for step in recipe.steps:
        if searched is not None and step.transform not in searched:
            return f"{step.transform} is not searched in this run (--transforms / --exclude-transforms)"
        why = left_out.get(step.transform) or _not_applicable(step, ctx)
        if why:
            return f"{step.label()} does not apply here: {why}"
        if step not in singles.get(step.transform, []):
            offered = "; ".join(s.label() for s in singles.get(step.transform, [])) or "none"
            return f"{step.label()} is not among the choices searched here for {step.transform} ({offered})"
    if len({s.transform for s in recipe.steps}) != len(recipe.steps):
        return "a transform appears twice"
    for i, step in enumerate(recipe.steps):
        transform = get_transform(step.transform)
        conflict = transform.conflict(transform.parse_params(step.params), [s for j, s in enumerate(recipe.steps) if j != i], ctx)
        if conflict:
            return f"{step.transform} cannot share this recipe: {conflict}"
    return "this combination is not in the space: at most 3 module transforms, one of each exclusive group, then up to 2 runtime transforms or one backend"


def _not_applicable(step: Step, ctx: TransformContext) -> str:
    try:
        check_recipe(Recipe((step,)), ctx)
    except NotApplicable as exc:
        return str(exc)
    return ""


def _rationale(item: Any) -> str:
    text = item.get("rationale") if isinstance(item, dict) else None
    return " ".join(str(text).split())[:300] if text else ""


def _written(item: Any) -> str:
    """A proposal that could not be read, as written (shortened)."""
    steps = item.get("steps", item) if isinstance(item, dict) else item
    text = json.dumps(steps, default=str)
    return text if len(text) <= 120 else text[:119] + "…"

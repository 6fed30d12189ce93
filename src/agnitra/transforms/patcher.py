"""The runtime patcher: applies a recipe to a live model and hands back a drop-in module.

The user's model is never modified. The patcher makes a *structural copy* (new module objects
with their own child, parameter, buffer and hook dicts, and new Parameter objects over the same
storage; see `workloads.model_copy`) and transforms replace modules, parameters and buffers in the
copy only, so an 8B model is not duplicated, and `param.data = ...` or `module.to(dtype)` on the
copy leaves the original's tensors alone. Parametrized modules (weight_norm, spectral_norm), tied
weights and hooks are copied as they are. If any step fails the copy is dropped and the error
says which step; the original is as it was.

Order: module transforms (precision, quantization, layout) first, then decoders get fresh KV
caches in the new precision, then runtime transforms (compile, CUDA graphs, threads) and
backends (ONNX Runtime) wrap the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from agnitra.errors import AgnitraError, NotApplicable, UserError, first_line
from agnitra.transforms.base import TransformContext, get_transform
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.model_copy import independent_copy

STAGE_ORDER = {"module": 0, "runtime": 1, "backend": 2}


class PatchError(AgnitraError):
    """A step of a recipe failed; the original model is untouched."""

    def __init__(self, step: str, exc: BaseException) -> None:
        super().__init__(f"{step}: {first_line(exc)}")
        self.step = step


class StepNotApplicable(NotApplicable):
    """A step found, as it was applied, that it does not apply to this model (a CUDA graph that
    cannot be captured around a forward that synchronises); the message names the step, so a
    search blames it and not the recipe's other steps."""

    def __init__(self, step: str, exc: NotApplicable) -> None:
        super().__init__(f"{step}: {exc}")
        self.step = step


@dataclass
class Patched:
    """A recipe applied: the drop-in module (for decoders it also carries its step functions, see
    `models.generate.step_functions`) and the notes its transforms left."""

    model: nn.Module
    recipe: Recipe
    notes: list[str] = field(default_factory=list)


def structural_copy(model: nn.Module) -> nn.Module:
    """New module and Parameter objects all the way down; parameter storage and buffers are shared."""
    return independent_copy(model, clone_buffers=False)


def validate_order(recipe: Recipe) -> None:
    """Module transforms before runtime transforms before backends; each transform once."""
    stages = [STAGE_ORDER[get_transform(s.transform).stage] for s in recipe.steps]
    if stages != sorted(stages):
        raise UserError(f"recipe '{recipe.name}' puts a runtime or backend transform before a module transform; order them module -> runtime -> backend")
    names = [s.transform for s in recipe.steps]
    if len(names) != len(set(names)):
        raise UserError(f"recipe '{recipe.name}' uses a transform twice")


def check_recipe(recipe: Recipe, ctx: TransformContext) -> None:
    """Raise NotApplicable for the first step that cannot run here (before any work is done)."""
    validate_order(recipe)
    for step in recipe.steps:
        transform = get_transform(step.transform)
        transform.check(ctx, transform.parse_params(step.params))


def apply_recipe(recipe: Recipe, ctx: TransformContext) -> Patched:
    check_recipe(recipe, ctx)
    model = structural_copy(ctx.workload.model)
    refreshed_caches = False
    patched = Patched(model=model, recipe=recipe)
    for step in recipe.steps:
        transform = get_transform(step.transform)
        if transform.stage != "module" and not refreshed_caches:
            _fresh_caches(patched.model, ctx)
            refreshed_caches = True
        try:
            params = transform.parse_params(step.params)
            patched.model = transform.apply(patched.model, ctx, params)
            patched.notes.extend(transform.notes(ctx, params))
        except NotApplicable as exc:
            raise StepNotApplicable(step.label(), exc) from exc
        except (UserError, AgnitraError):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure drops the copy and names the step
            raise PatchError(step.label(), exc) from exc
    if not refreshed_caches:
        _fresh_caches(patched.model, ctx)
    return patched


def _fresh_caches(model: nn.Module, ctx: TransformContext) -> None:
    """Decoders: the copy gets its own KV cache (in its own precision): never the user's."""
    spec = ctx.workload.decoder
    if spec is not None and hasattr(model, "setup_caches"):
        model.setup_caches(spec.batch, spec.max_seq_len)


def unwrap(model: Any) -> nn.Module:
    """The innermost module under any runtime wrappers."""
    while hasattr(model, "inner") and isinstance(model.inner, nn.Module):
        model = model.inner
    return model

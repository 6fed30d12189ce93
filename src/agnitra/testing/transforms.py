"""The transform contract: what `optimize` relies on of every registered transform.

- `choices()` offers steps whose parameters parse and round-trip through recipe.json;
- `check()` either passes or raises `NotApplicable` with a reason a user can read;
- where it applies, `apply()` works on the patcher's copy and returns a module that runs on the
  example inputs, while the user's model stays bitwise as it was (parameters, buffers, dtype,
  device, train/eval mode, requires_grad);
- `conflict()` answers with None or a reason, and `prior_factor()` with a positive number.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import torch

from agnitra.errors import NotApplicable
from agnitra.transforms.base import Transform, TransformContext
from agnitra.transforms.patcher import structural_copy
from agnitra.transforms.recipe import Recipe, Step
from agnitra.workloads.base import Workload


def model_state(model: torch.nn.Module) -> dict[str, Any]:
    """A bitwise snapshot of what a transform must not change in the user's model."""
    return {
        "tensors": {name: (t.detach().clone(), t.dtype, t.device) for name, t in model.state_dict(keep_vars=True).items()},
        "training": {name: m.training for name, m in model.named_modules()},
        "requires_grad": {name: p.requires_grad for name, p in model.named_parameters()},
    }


def same_state(before: dict[str, Any], after: dict[str, Any]) -> str:
    """'' when the snapshots agree, else what changed."""
    if before["training"] != after["training"]:
        return "a module's train/eval mode"
    if before["requires_grad"] != after["requires_grad"]:
        return "a parameter's requires_grad"
    if before["tensors"].keys() != after["tensors"].keys():
        return "the set of parameters and buffers"
    for name, (tensor, dtype, device) in before["tensors"].items():
        now, now_dtype, now_device = after["tensors"][name]
        if (dtype, device) != (now_dtype, now_device) or not torch.equal(tensor, now):
            return f"{name}"
    return ""


def check_transform(transform: Transform, workload: Workload, device: torch.device, calls: int | None = None) -> list[str]:
    """Run the contract on one transform and workload; AssertionError names the broken part.
    Returns what was exercised ("choice X: applied", "choice Y: not applicable: ..."). `calls`:
    run the applied model on at most that many choices (a compile's call compiles; every choice
    is still applied and checked)."""
    ctx = TransformContext(workload, device)
    said = []
    called = 0
    choices = transform.choices(ctx)
    assert choices, f"{transform.name}: choices() offers nothing (the default is its default parameters)"
    for choice in choices:
        assert choice.transform == transform.name, f"{transform.name}: a choice names another transform ({choice.transform})"
        params = transform.parse_params(dict(choice.params))
        saved = json.loads(json.dumps(Recipe((Step(transform.name, dataclasses.asdict(params)),)).to_dict()))  # as recipe.json holds it
        assert transform.parse_params(saved["steps"][0]["params"]) == params, f"{choice.label()}: parameters do not round-trip through recipe.json"
        assert transform.conflict(params, [], ctx) is None or isinstance(transform.conflict(params, [], ctx), str), f"{choice.label()}: conflict() must answer None or a reason"
        factor = transform.prior_factor(params, [], ctx)
        assert isinstance(factor, (int, float)) and factor > 0, f"{choice.label()}: prior_factor() must be a positive number, not {factor!r}"
        try:
            transform.check(ctx, params)
        except NotApplicable as exc:
            assert str(exc).strip(), f"{choice.label()}: check() raised NotApplicable without a reason"
            said.append(f"{choice.label()}: not applicable: {exc}")
            continue
        call = calls is None or called < calls
        said.append(f"{choice.label()}: {_applied(transform, params, choice.label(), ctx, call)}")
        called += call
    return said


def _applied(transform: Transform, params: Any, label: str, ctx: TransformContext, call: bool = True) -> str:
    """apply() on the patcher's copy, as a recipe would run it (registered or not)."""
    before = model_state(ctx.workload.model)
    try:
        model = transform.apply(structural_copy(ctx.workload.model), ctx, params)
    except NotApplicable as exc:  # found out while applying: a record for the search, as a check's
        assert str(exc).strip(), f"{label}: apply() raised NotApplicable without a reason"
        return f"not applicable (found while applying): {exc}"
    assert isinstance(model, torch.nn.Module), f"{label}: apply() returned {type(model).__name__}, not a module"
    assert model is not ctx.workload.model, f"{label}: apply() returned the user's model itself"
    with torch.no_grad():
        if call and ctx.workload.decoder is None:
            model(*ctx.workload.example_inputs)
    changed = same_state(before, model_state(ctx.workload.model))
    assert not changed, f"{label}: the user's model changed ({changed})"
    return "applied, the user's model unchanged"

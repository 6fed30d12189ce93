"""`layout`: the input channels of Linear layers permuted, computing the same function, so that
the weight format after it in the recipe loses least: int4's groups of consecutive channels hold
channels of similar range, 2:4's groups of four hold a mix of large and small weights.

It serves one weight-format step of its recipe (`serves`: `quant:int4:gN` for int4-weight-only of
group N, `sparsity:2:4` for sparsity-2of4) and is refused in a recipe without it. The orders come
from the channel-permutation solver (`transforms.permutation`) on calibration inputs (the
workload's own calibration data: a decoder's training text, never its held-out text), are cached
under the cache folder by the weights' hash, and are applied to the patcher's copy as new tensors
only once the copy's outputs are shown unchanged by them."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from agnitra.errors import NotApplicable, UserError, check
from agnitra.transforms.base import Choice, Transform, TransformContext, register_transform
from agnitra.transforms.recipe import Step

INT4_GROUPS = (128, 64, 32)


def served_step(text: str):
    """The state step `serves` names, or a NotApplicable saying what it may be."""
    from agnitra.transforms.permutation.steps import parse_steps

    try:
        steps = parse_steps(text)
    except UserError as exc:
        raise NotApplicable(f"serves={text!r} is not a state transform ({exc})") from None
    check(len(steps) == 1 and (steps[0].kind == "sparsity" or (steps[0].kind == "quant" and steps[0].bits == 4)),
          f"serves={text!r}: it orders channels for one step, quant:int4:gN or sparsity:2:4")
    return steps[0]


def _serving(step_text: str, others: list[Step]) -> bool:
    """Whether `others` hold the weight-format step `step_text` names."""
    step = served_step(step_text)
    if step.kind == "sparsity":
        return any(s.transform == "sparsity-2of4" for s in others)
    return any(s.transform == "int4-weight-only" and s.params.get("group_size") == step.group for s in others) or any(
        s.transform == "mixed-precision" and s.params.get("low") == "int4" and s.params.get("group_size") == step.group for s in others)


@register_transform
class ChannelOrder(Transform):
    name = "layout"
    description = "input channels of Linear layers permuted (the same function) so that the int4 groups or 2:4 groups of the weight format after it lose least"
    requires = "a recipe with the weight format it serves (int4-weight-only of its group size, or sparsity-2of4); a model torch.export can capture"

    @dataclass
    class Params:
        serves: str = "quant:int4:g128"  # quant:int4:gN (int4-weight-only, group N) or sparsity:2:4
        solve_seconds: float = 5.0  # the solver's time for the step's spaces (a candidate's setup pays it; cached for the next)
        calibration_batches: int = 4
        gather: bool = False  # the residual stream's readers each in an order of its own, through a gather of its input at run time

    order = 25  # before the weight formats (30)
    acts_on = frozenset({"matmul"})
    exclusive = "channel-order"

    def choices(self, ctx: TransformContext) -> list[Choice]:
        served = [f"quant:int4:g{g}" for g in INT4_GROUPS] + (["sparsity:2:4"] if ctx.device.type == "cuda" else [])
        # no speed of its own and a solve to pay: after the weight formats alone, whose quality it may rescue
        return [Choice(self.name, (("serves", text), ("gather", gather)), 0.9 if not gather else 0.85) for text in served for gather in (False, True)]

    def conflict(self, params, others: list[Step], ctx: TransformContext) -> str | None:
        if not _serving(params.serves, others):
            return f"layout orders channels for {params.serves}, which this recipe does not apply"
        return None

    def check(self, ctx: TransformContext, params) -> None:
        served_step(params.serves)
        check(params.solve_seconds > 0, "solve_seconds must be above 0")
        check(params.calibration_batches >= 1, "calibration_batches must be at least 1")
        check(any(isinstance(m, nn.Linear) for m in ctx.workload.model.modules()), "layout: the model has no nn.Linear layer to order channels for")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        from agnitra.config import load_settings
        from agnitra.transforms.permutation.cache import PermutationCache
        from agnitra.transforms.permutation.gather import as_wrapped, gather_readers, unreachable_readers
        from agnitra.transforms.permutation.order import activation_norms, permute_checked, solve_orders, targets
        from agnitra.transforms.permutation.spaces import find_spaces

        step = served_step(params.serves)
        calibration = ctx.calibration_inputs or ctx.workload.calibration_inputs(params.calibration_batches)
        spaces = find_spaces(model, calibration[0])
        layers = targets(model, spaces, step, heads=True)  # the weight format converts heads too: their groups count
        check(layers, f"layout: no Linear layer that {params.serves} fits has channels it may reorder")
        if params.gather:
            check(gather_readers(model, unreachable_readers(spaces, layers).names, copy_weights=True),
                  f"layout: gather: no layer {params.serves} fits reads a channel space other layers read too or one that cannot move; gather=False orders them")
            spaces = find_spaces(model, calibration[0])
            layers = targets(model, spaces, step, heads=True)
        # int4's error is weighed by each channel's activation norm; 2:4 prunes by magnitude alone
        norms = activation_norms(model, calibration, list(layers)) if step.kind == "quant" else {}
        orders = solve_orders(model, spaces, layers, norms, step, 1, params.solve_seconds, cache=PermutationCache(load_settings().cache_path / "layout"),
                              calibration=calibration)
        if orders.chosen or orders.inputs:
            why_not = permute_checked(model, spaces, orders.chosen, calibration[:1], in_place=False, inputs=orders.inputs)
            if why_not:
                raise RuntimeError(f"layout: {why_not}")
        as_wrapped(model)  # a gathered layer as a gather in front of a plain Linear, which the weight format converts
        return model

"""`fuse-projections`: projections that read the same input, stacked into one matmul.

Found by structure (`transforms.structure`): one forward of the example inputs shows which
nn.Linear / transformers Conv1D layers read the very same tensor (q/k/v, gate/up, the key/value of
cross-attention across all decoder layers); each such group becomes one nn.Linear over the stacked
rows, its members slices of the product (`StackedProjection`). That covers the transformers
families whatever their class names or release. Two paths come first, where they apply, because
they rewrite the parent's code and need no runtime bookkeeping: our Llama's q|k|v and gate|up
(`StackedQKVAttention`, `StackedFeedForward`, which the decode kernels need) and transformers 5's
BERT-family self-attention (`models.hf_attention`).

A decode step is a chain of small GEMVs, each a kernel launch of a few microseconds; stacking
removes three launches per layer (for llama-1b, 66 of about 300 per token) and reads the shared
input once. Output rows are independent, so the numbers are the same; quantising transforms that
come after it (int8, int4, Agnitra's kernels) quantise the stacked Linear row by row, as they would
have the separate ones (a structural group's stacked Linear is a plain nn.Linear, quantised once).
The structural groups compose with torch.compile (one matmul per group in the graph, no
recompiles: tests/test_hf_families.py) and with ONNX export. Where no two layers read one tensor
(GPT-2's c_attn is already stacked; a convnet has one Linear) the transform is refused, with the
counts that show it.
"""

from __future__ import annotations

from torch import nn

from agnitra.errors import NotApplicable
from agnitra.transforms.base import Choice, Transform, TransformContext, register_transform, replace_modules


def _projections(module: nn.Module) -> list[nn.Module] | None:
    """The q|k|v projections of a Llama Attention or a transformers encoder self-attention, the
    gate|up ones of a Llama FeedForward, else None."""
    from agnitra.models.hf_attention import encoder_self_attention
    from agnitra.models.llama import Attention, FeedForward

    if encoder_self_attention(module):
        return [module.query, module.key, module.value]
    if type(module) is Attention:
        return [module.wq, module.wk, module.wv]
    if type(module) is FeedForward:
        return [module.w1, module.w3]
    return None


def _stacked(module: nn.Module, stack) -> nn.Module:
    from agnitra.models.hf_attention import StackedSelfAttention, encoder_self_attention
    from agnitra.models.llama import Attention, StackedFeedForward, StackedQKVAttention

    stacked = stack(_projections(module))
    if encoder_self_attention(module):
        return StackedSelfAttention(module, stacked)
    return StackedQKVAttention(module, stacked) if type(module) is Attention else StackedFeedForward(stacked, module.w2)


def stack_projections(model: nn.Module, stackable, stack) -> int:
    """Replace each Llama Attention / FeedForward whose projections satisfy `stackable(list)` by its
    stacked variant over `stack(list)`; returns how many."""
    return replace_modules(model, lambda n, m: (p := _projections(m)) is not None and stackable(p), lambda n, m: _stacked(m, stack))


def _detection(ctx: TransformContext):
    from agnitra.transforms.structure import find_projection_groups

    return find_projection_groups(ctx.workload.model, ctx.workload.example_inputs)


def stackable_targets(module: nn.Module) -> bool:
    """A module the class-specific paths stack (our Llama's attention / feed-forward, a BERT-family self-attention)."""
    from agnitra.models.llama import linears_stack

    return (p := _projections(module)) is not None and linears_stack(p)


def _has_targets(model: nn.Module) -> bool:
    return any(stackable_targets(m) for m in model.modules())


def _unstackable_attention(model: nn.Module) -> str:
    """Why the first q/k/v self-attention in `model` cannot be stacked (e.g. transformers 4.x's), or ''."""
    from agnitra.models.hf_attention import has_qkv_projections, unstackable_reason

    reasons = (unstackable_reason(m) for m in model.modules() if has_qkv_projections(m))
    return next((f" ({reason})" for reason in reasons if reason), "")


@register_transform
class FuseProjections(Transform):
    name = "fuse-projections"
    description = "projections that read the same input (q|k|v, gate|up, cross-attention k|v) stacked into one matmul each"
    requires = "two or more nn.Linear / Conv1D layers reading the same tensor in a forward of the example inputs; before any quantising transform"
    stage = "module"

    order = 0  # first in every recipe: quantisers that follow quantise the stacked Linears
    acts_on = frozenset({"matmul"})

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.2 if ctx.decoder and ctx.device.type == "cuda" else 1.02)]

    def check(self, ctx: TransformContext, params) -> None:
        model = ctx.workload.model
        if _has_targets(model):
            return
        detection = _detection(ctx)
        if not detection.groups:
            raise NotApplicable("no Llama attention or feed-forward, nor transformers 5 encoder self-attention, with separate q/k/v or gate/up"
                                f" nn.Linear projections to stack, and by structure {detection.why_none()}" + _unstackable_attention(model))

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        from agnitra.models.llama import linears_stack, stack_linears
        from agnitra.transforms.structure import stack_groups

        count = stack_projections(model, linears_stack, stack_linears)
        if not _has_targets(ctx.workload.model):  # what the class-specific paths stacked is not looked for again
            count += stack_groups(model, _detection(ctx).groups)
        if count == 0:
            raise NotApplicable("the projections are no longer plain Linears (a quantising step ran first?); put fuse-projections before it")
        return model

    def notes(self, ctx: TransformContext, params) -> list[str]:
        if _has_targets(ctx.workload.model):
            return []
        detection = _detection(ctx)
        note = f"fuse-projections: by structure, {detection.describe_groups()}; each group one matmul per input"
        if detection.repeated:
            note += f"; {len(detection.repeated)} layers called more than once per forward left alone"
        return [note]

"""`fuse-projections`: Llama's q, k, v projections as one Linear, and its gate and up projections
as another, over the stacked weight rows; the same for the q, k, v of transformers' encoder
self-attention (BERT family).

A decode step is a chain of small GEMVs, each a kernel launch of a few microseconds; stacking
removes three launches per layer (for llama-1b, 66 of about 300 per token) and reads the shared
input once. Output rows are independent, so the numbers are the same; quantising transforms that
come after it (int8, int4, Agnitra's kernels) quantise the stacked Linear row by row, as they would
have the separate ones.
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


def _has_targets(model: nn.Module) -> bool:
    from agnitra.models.llama import linears_stack

    return any((p := _projections(m)) is not None and linears_stack(p) for m in model.modules())


def _unstackable_attention(model: nn.Module) -> str:
    """Why the first q/k/v self-attention in `model` cannot be stacked (e.g. transformers 4.x's), or ''."""
    from agnitra.models.hf_attention import has_qkv_projections, unstackable_reason

    reasons = (unstackable_reason(m) for m in model.modules() if has_qkv_projections(m))
    return next((f" ({reason})" for reason in reasons if reason), "")


@register_transform
class FuseProjections(Transform):
    name = "fuse-projections"
    description = "q|k|v (Llama, transformers encoders) and gate|up (Llama) projections stacked into one Linear each"
    requires = "a Llama of the zoo or a transformers 5 BERT-family encoder (separate q/k/v Linears); before any quantising transform"
    stage = "module"

    order = 0  # first in every recipe: quantisers that follow quantise the stacked Linears
    acts_on = frozenset({"matmul"})

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.2 if ctx.decoder and ctx.device.type == "cuda" else 1.02)]

    def check(self, ctx: TransformContext, params) -> None:
        model = ctx.workload.model
        if not _has_targets(model):
            raise NotApplicable("no Llama attention or feed-forward, nor transformers 5 encoder self-attention, with separate q/k/v or gate/up nn.Linear projections to stack" + _unstackable_attention(model))

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        from agnitra.models.llama import linears_stack, stack_linears

        count = stack_projections(model, linears_stack, stack_linears)
        if count == 0:
            raise NotApplicable("the projections are no longer plain Linears (a quantising step ran first?); put fuse-projections before it")
        return model

"""`fuse-projections`: Llama's q, k, v projections as one Linear, and its gate and up projections
as another, over the stacked weight rows.

A decode step is a chain of small GEMVs, each a kernel launch of a few microseconds; stacking
removes three launches per layer (for llama-1b, 66 of about 300 per token) and reads the shared
input once. Output rows are independent, so the numbers are the same; quantising transforms that
come after it (int8, int4, Agnitra's kernels) quantise the stacked Linear row by row, as they would
have the separate ones.
"""

from __future__ import annotations

from torch import nn

from agnitra.errors import NotApplicable, check
from agnitra.transforms.base import Transform, TransformContext, register_transform, replace_modules


def _targets(model: nn.Module):
    """(attentions, feed-forwards) whose projections are floating-point nn.Linear that stack."""
    from agnitra.models.llama import Attention, FeedForward, linears_stack as stackable

    attentions = [m for m in model.modules() if type(m) is Attention and stackable([m.wq, m.wk, m.wv])]
    ffns = [m for m in model.modules() if type(m) is FeedForward and stackable([m.w1, m.w3])]
    return attentions, ffns


@register_transform
class FuseProjections(Transform):
    name = "fuse-projections"
    description = "Llama q|k|v and gate|up projections stacked into one Linear each (3 launches fewer per layer)"
    requires = "a Llama-family decoder of the zoo (separate wq/wk/wv and w1/w3 Linears); before any quantising transform"
    stage = "module"

    def check(self, ctx: TransformContext, params) -> None:
        attentions, ffns = _targets(ctx.workload.model)
        check(attentions or ffns, "no Llama attention or feed-forward with separate q/k/v or gate/up nn.Linear projections to stack")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        from agnitra.models.llama import Attention, FeedForward, StackedFeedForward, StackedQKVAttention, stack_linears

        attentions, ffns = (set(map(id, group)) for group in _targets(model))
        count = replace_modules(model, lambda n, m: type(m) is Attention and id(m) in attentions, lambda n, m: StackedQKVAttention(m, stack_linears([m.wq, m.wk, m.wv])))
        count += replace_modules(model, lambda n, m: type(m) is FeedForward and id(m) in ffns, lambda n, m: StackedFeedForward(stack_linears([m.w1, m.w3]), m.w2))
        if count == 0:
            raise NotApplicable("the projections are no longer plain Linears (a quantising step ran first?); put fuse-projections before it")
        return model

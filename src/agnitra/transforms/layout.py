"""`channels-last`: 2-D convolutions in NHWC memory order (channels_last), where oneDNN and cuDNN
have their fastest kernels.

Conv weights are replaced by channels_last copies in the patcher's copy (the user's weights stay
as they are); a wrapper hands the model its 4-D floating inputs in channels_last and gives 4-D
outputs back in the default (contiguous) order, so values and layout are what the caller expects.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils._pytree import tree_map

from agnitra.errors import check
from agnitra.transforms.base import Choice, Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import ModelWrapper


def _conv_weight(module: nn.Module) -> torch.Tensor | None:
    """The 4-D floating weight of a 2-D convolution, or None for anything else."""
    if not isinstance(module, nn.Conv2d):
        return None
    weight = module._parameters.get("weight")
    return weight if weight is not None and weight.dim() == 4 and weight.is_floating_point() else None


def count_conv2d(model: nn.Module) -> int:
    return sum(_conv_weight(m) is not None for m in model.modules())


def convert_conv_weights(model: nn.Module) -> int:
    """Conv weights to channels_last as new parameters of the copy; returns how many."""
    converted = 0
    for module in model.modules():
        weight = _conv_weight(module)
        if weight is not None:
            module._parameters["weight"] = nn.Parameter(weight.detach().contiguous(memory_format=torch.channels_last), requires_grad=False)
            converted += 1
    return converted


def _to_channels_last(x):
    if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point():
        return x.contiguous(memory_format=torch.channels_last)
    return x


def _to_contiguous(x):
    if isinstance(x, torch.Tensor) and x.dim() == 4 and not x.is_contiguous():
        return x.contiguous()
    return x


class ChannelsLastInputs(ModelWrapper):
    """Runs the inner model on channels_last 4-D floating inputs; 4-D outputs come back contiguous."""

    def forward(self, *args, **kwargs):
        args, kwargs = tree_map(_to_channels_last, (args, kwargs))
        return tree_map(_to_contiguous, self.inner(*args, **kwargs))


@register_transform
class ChannelsLast(Transform):
    name = "channels-last"
    description = "2-D convolutions in channels_last (NHWC) memory order: weights and inputs"
    requires = "a model with 2-D convolutions"
    stage = "module"

    order = 60
    acts_on = frozenset({"conv"})

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.3)]

    def check(self, ctx: TransformContext, params) -> None:
        check(count_conv2d(ctx.workload.model) > 0, "the model has no 2-D convolutions; channels_last only changes how convolution inputs and weights are laid out")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        convert_conv_weights(model)
        return ChannelsLastInputs(model)

"""Convolution with its epilogue fused: relu(conv(x, w) + bias [+ residual]) in one cuDNN call.

cuDNN's runtime-fusion engines run the bias add, the residual add and the ReLU in the
convolution's own epilogue (`torch.cudnn_convolution_relu`, `torch.cudnn_convolution_add_relu`),
so the convolution's output is written once instead of being written, read back by a pointwise
kernel and written again. Registered as a custom operator so `torch.compile` keeps it whole and
CUDA graphs capture it; on the CPU it computes the same thing unfused (the reference and the
tests' path).

`FusedConv2d` is an `nn.Conv2d` (so layout transforms still see its weight) whose bias is the
folded BatchNorm and whose forward takes the residual to add before the ReLU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _output_format(x: torch.Tensor) -> torch.memory_format:
    """channels_last when the 4-D tensor is laid out NHWC (and is not also plain contiguous)."""
    nhwc = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return torch.channels_last if nhwc else torch.contiguous_format


@torch.library.custom_op("agnitra::conv_bias_relu", mutates_args=())
def conv_bias_relu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor | None,
    stride: list[int], padding: list[int], dilation: list[int], groups: int,
) -> torch.Tensor:
    """relu(conv2d(x, weight) + bias + residual), residual optional; output in x's memory format."""
    fmt = _output_format(x)
    if x.is_cuda:
        if residual is None:
            out = torch.cudnn_convolution_relu(x, weight, bias, stride, padding, dilation, groups)
        else:
            out = torch.cudnn_convolution_add_relu(x, weight, residual, 1.0, bias, stride, padding, dilation, groups)
    else:
        out = F.conv2d(x, weight, bias, stride, padding, dilation, groups)
        out = F.relu(out if residual is None else out + residual)
    return out.contiguous(memory_format=fmt)


@conv_bias_relu.register_fake
def _(x, weight, bias, residual, stride, padding, dilation, groups):
    out = F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    return out.contiguous(memory_format=_output_format(x))


class FusedConv2d(nn.Conv2d):
    """A Conv2d with BatchNorm folded into its weight and bias, and optionally the residual add and
    ReLU that follow it run in the convolution's epilogue."""

    def __init__(self, conv: nn.Conv2d, weight: torch.Tensor, bias: torch.Tensor, relu: bool = False) -> None:
        with torch.device("meta"):
            super().__init__(
                conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                conv.dilation, conv.groups, bias=True,
            )
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = nn.Parameter(bias, requires_grad=False)
        self.relu = relu

    def extra_repr(self) -> str:
        return super().extra_repr() + (", relu=True" if self.relu else "")

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if not self.relu:
            out = F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
            return out if residual is None else out + residual
        return torch.ops.agnitra.conv_bias_relu(
            x, self.weight, self.bias, residual, list(self.stride), list(self.padding), list(self.dilation), self.groups
        )


def fold_batchnorm(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of conv followed by an eval-mode BatchNorm, computed in float32 and cast back
    to the conv's dtype; the weight keeps the conv weight's memory format."""
    w = conv.weight.detach()
    gamma = bn.weight.detach().float() if bn.weight is not None else torch.ones_like(bn.running_var.float())
    beta = bn.bias.detach().float() if bn.bias is not None else torch.zeros_like(gamma)
    scale = gamma * torch.rsqrt(bn.running_var.float() + bn.eps)  # [C_out]
    bias = conv.bias.detach().float() if conv.bias is not None else torch.zeros_like(scale)
    folded_bias = (bias - bn.running_mean.float()) * scale + beta
    folded_w = (w.float() * scale.view(-1, 1, 1, 1)).to(w.dtype)
    return folded_w.contiguous(memory_format=_output_format(w)), folded_bias.to(w.dtype)

"""`precision`: run the model in bf16 or fp16 (weights converted, inputs cast in, outputs cast back),
and `tf32`: fp32 matmuls and convolutions on NVIDIA tensor cores (TF32)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agnitra.errors import check
from agnitra.transforms.base import Choice, Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import CastingWrapper, ModelWrapper

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def convert_weights(model: nn.Module, dtype: torch.dtype) -> None:
    """Parameters and persistent floating buffers to `dtype`, in the patcher's copy only.

    Non-persistent buffers stay as they are: rotary tables and masks are kept in their own
    precision on purpose, and KV caches are allocated afresh by the patcher.
    """
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and p.is_floating_point():
                module._parameters[name] = nn.Parameter(p.detach().to(dtype), requires_grad=False)
        for name, b in list(module._buffers.items()):
            if b is not None and b.is_floating_point() and name not in module._non_persistent_buffers_set:
                module._buffers[name] = b.to(dtype)


def _fast_cpu_bf16() -> bool:
    """AMX or AVX512-BF16: bf16 matmuls run 2-7x faster than fp32 on such CPUs."""
    from agnitra.telemetry.signature import cpu_signature

    flags = set(cpu_signature()["isa_flags"])
    return bool(flags & {"amx_bf16", "avx512_bf16"})


@register_transform
class Precision(Transform):
    name = "precision"
    description = "weights and activations in bf16 or fp16; inputs and outputs keep their dtype"
    requires = "a floating-point model; fp16 needs a GPU (few CPU kernels); bf16 is fast on CPUs with AMX/AVX512-BF16"

    @dataclass
    class Params:
        dtype: str = "bf16"

    order = 10  # before the quantisers: on the CPU their fast kernels are the bf16 ones

    def lossy(self, params: dict) -> bool:
        return True

    def choices(self, ctx: TransformContext) -> list[Choice]:
        if ctx.dtype != torch.float32:
            return [Choice(self.name)]  # check() says why it does not apply
        if ctx.device.type == "cuda":
            return [Choice(self.name, (("dtype", "bf16"),), 1.8), Choice(self.name, (("dtype", "fp16"),), 1.8)]
        return [Choice(self.name, (("dtype", "bf16"),), 2.0 if _fast_cpu_bf16() else 0.8)]

    def check(self, ctx: TransformContext, params) -> None:
        check(params.dtype in DTYPES, f"precision dtype must be one of {', '.join(DTYPES)}, not {params.dtype!r}")
        target = DTYPES[params.dtype]
        check(ctx.dtype == torch.float32, f"the model already runs in {str(ctx.dtype).replace('torch.', '')}; precision lowers fp32 models")
        check(not (target == torch.float16 and ctx.device.type == "cpu"), "fp16 on the CPU has few fast kernels; use bf16 there")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        target = DTYPES[params.dtype]
        convert_weights(model, target)
        return CastingWrapper(model, compute_dtype=target, output_dtype=ctx.dtype)


class _Tf32(ModelWrapper):
    def forward(self, *args, **kwargs):
        matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            return self.inner(*args, **kwargs)
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@register_transform
class Tf32(Transform):
    name = "tf32"
    description = "fp32 matmuls and convolutions on tensor cores in TF32 (10-bit mantissa), only while the model runs"
    requires = "an NVIDIA GPU (Ampere or newer) and an fp32 model"
    stage = "runtime"

    def lossy(self, params: dict) -> bool:
        return True

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.5)]

    def conflict(self, params, others, ctx: TransformContext) -> str | None:
        if any(s.transform == "precision" for s in others):
            return "precision runs the matmuls in bf16/fp16: no fp32 matmul is left for TF32"
        return None

    def check(self, ctx: TransformContext, params) -> None:
        check(ctx.device.type == "cuda", "TF32 is an NVIDIA tensor-core mode; this run is on the CPU")
        check(torch.cuda.get_device_capability(ctx.device)[0] >= 8, "TF32 needs an Ampere or newer GPU")
        check(ctx.dtype == torch.float32, "TF32 applies to fp32 models")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        return _Tf32(model)

"""Quantisation and sparsity of `nn.Linear` (and transformers `Conv1D`) layers: `int8-weight-only`,
`int4-weight-only`, `dynamic-int8`, `fp8` and `sparsity-2of4`.

Every transform replaces eligible `nn.Linear` modules of the patcher's copy by a quantised module
built from the Linear's weight (read, never written: the tensors are the user's). Each quantised
module keeps the Linear's call semantics (input [..., in_features] -> [..., out_features], bias
added last), stores its weights as buffers, and has no data-dependent Python control flow in
`forward` (the kernel is chosen from device, dtype and static shapes only), so it compiles.

transformers' GPT-2-style `Conv1D` (weight [in, out], y = x @ W + b; every projection of GPT-2,
OpenAI GPT, ImageGPT, CLVP, Decision Transformer) is the same function with the weight
transposed: it is recognised by behaviour (`structure.is_conv1d`: its class name, `nf` and weight
layout; transformers is never imported here) and converted like a Linear, its weight transposed
once to the Linear layout [out, in] at quantisation time (`as_linear`).

Numerics (W is the Linear's weight [N, K], x the activations [M, K]):

* int8 weight-only: symmetric per output row, s[n] = max_k |W[n, k]| / 127 (computed in fp32,
  stored in the activation dtype), q = clamp(round(W / s), -127, 127) in int8. y = (x @ q^T) * s.
  Per-element weight error <= s/2, i.e. at most 0.4% of the row's largest magnitude. CPU:
  `aten._weight_int8pack_mm` (fp32, and bf16/fp16 when K % 16 == 0: in torch 2.13 the bf16
  kernel reads out of bounds for other K); elsewhere the same math as `F.linear(x, q.to(x.dtype))
  * s` (gpt-fast's form, which torch.compile fuses into one matmul with the dequantisation).
* int4 weight-only: asymmetric per group of `group_size` consecutive input features, in the
  tinygemm convention: s = (max - min) / 15, z = min + 8 s (a float "zero"), q = clamp(round((W -
  z) / s + 8), 0, 15), dequantised W' = (q - 8) s + z. Per-element error <= s/2 = range/30 of the
  group. Codes are packed two per byte (even feature in the high nibble); scales and zeros are
  one [K / group_size, N, 2] tensor. CPU: `_weight_int4pack_mm_for_cpu` (fp32/bf16/fp16; N % 16,
  group 32..256); CUDA: tinygemm `_weight_int4pack_mm` (bf16 activations, sm80+, N % 8, K % 32);
  otherwise `int4_reference_matmul` dequantises.
  CPU speed (torch 2.13, AVX-512/AMX, one 4096x4096 layer, one token): with bf16 activations the
  int8 and int4 kernels take about half the time of bf16 nn.Linear; their fp32 kernels are 5-12x
  SLOWER than fp32 nn.Linear, so on the CPU put `precision` (bf16) first, or use `dynamic-int8`.
* dynamic int8 (CPU): torch's dynamically quantised Linear: weights qint8 per output channel
  (symmetric), activations quantised per tensor at run time (uint8, per call), int8 GEMM (fbgemm
  / oneDNN), output fp32.
* fp8: weights float8_e4m3fn with one fp32 scale per output row (max |W| / 448); activations
  quantised per row at run time the same way; `torch._scaled_mm` with row-wise scales, bf16 out.
* 2:4 sparsity: of every 4 consecutive input features the 2 of largest magnitude are kept, then
  the weight is compressed by `torch.sparse.to_sparse_semi_structured` (CUDA, fp16/bf16). This
  changes the function (no fine-tuning here); the optimizer's verification decides if it is kept.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from agnitra.errors import NotApplicable, check
from agnitra.kernels.quant.formats import pack_int4_high_first as pack_int4  # this module's int4 layout: even feature high
from agnitra.kernels.quant.formats import quantize_int4_codes, quantize_int8_rowwise
from agnitra.kernels.quant.formats import unpack_int4_high_first as unpack_int4
from agnitra.transforms import structure
from agnitra.transforms.base import Choice, Step, Transform, TransformContext, register_transform, replace_modules

logger = logging.getLogger(__name__)

INT4_GROUP_SIZES = (32, 64, 128, 256)  # what the CPU and CUDA int4 kernels accept
FP8_MAX = 448.0  # largest finite float8_e4m3fn
_FP8_ALLOW_CPU = False  # tests only: torch._scaled_mm also runs on the CPU, slowly

# a layer's fitness check: None when it can be converted, else the reason it is skipped
FitFn = Callable[[int, int, torch.device, torch.dtype], "str | None"]


# --------------------------------------------------------------------------------------------
# Choosing layers
# --------------------------------------------------------------------------------------------


def skip_patterns(skip: str) -> list[str]:
    """"output, lm_head" -> ["output", "lm_head"]."""
    return [s.strip() for s in skip.split(",") if s.strip()]


def is_quantisable(module: nn.Module) -> bool:
    """A plain nn.Linear (exact type: subclasses such as MultiheadAttention's out_proj are read by
    their owners) or a transformers Conv1D."""
    return type(module) is nn.Linear or structure.is_conv1d(module)


def as_linear(layer: nn.Module) -> nn.Linear:
    """The layer as an nn.Linear computing the same function, for the quantised modules' builders:
    a Linear as it is; a Conv1D's weight [in, out] transposed to a new [out, in] tensor (its own
    weight is left as it was), its bias shared. Nothing here is trained: no gradients."""
    if not structure.is_conv1d(layer):
        return layer
    k, n = layer.weight.shape
    linear = nn.Linear(k, n, bias=layer.bias is not None, device="meta")
    linear.weight = nn.Parameter(layer.weight.detach().t().contiguous(), requires_grad=False)  # [N, K]
    if layer.bias is not None:
        linear.bias = nn.Parameter(layer.bias.detach(), requires_grad=False)  # [N]
    return linear


def _skip_reason(name: str, layer: nn.Module, min_features: int, patterns: list[str], fits: FitFn, device, dtype) -> str | None:
    if any(p in name for p in patterns):
        return "named in skip"
    k, n = structure.in_features(layer), structure.out_features(layer)
    if min(k, n) < min_features:
        return f"smaller than {min_features} features"
    return fits(k, n, torch.device(device), dtype)


@dataclass
class Selection:
    """Which Linear / Conv1D layers a transform converts, and why the others are left alone."""

    chosen: list[str]
    skipped: dict[str, int]  # reason -> count

    def describe(self) -> str:
        return ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items())) or "none skipped"


def select_linears(model: nn.Module, min_features: int, skip: str, fits: FitFn, device, dtype: torch.dtype) -> Selection:
    """Plain nn.Linear and Conv1D layers of `model` that `fits` accepts at `device`/`dtype`."""
    chosen, skipped = [], {}
    patterns = skip_patterns(skip)
    for name, module in model.named_modules():
        if not is_quantisable(module):
            continue
        reason = _skip_reason(name, module, min_features, patterns, fits, device, dtype)
        if reason is None:
            chosen.append(name)
        else:
            skipped[reason] = skipped.get(reason, 0) + 1
    return Selection(chosen, skipped)


def check_selection(ctx: TransformContext, transform: str, params, fits: FitFn) -> Selection:
    """NotApplicable unless at least one Linear or Conv1D of the user's model can be converted."""
    check(params.min_features >= 1, f"{transform}: min_features must be at least 1")
    found = select_linears(ctx.workload.model, params.min_features, params.skip, fits, ctx.device, ctx.dtype)
    check(found.chosen, f"{transform}: no nn.Linear or Conv1D layer to convert ({found.describe()})")
    return found


def convert_linears(model: nn.Module, transform: str, params, fits: FitFn, build: Callable[[nn.Linear], nn.Module]) -> int:
    """Replace the fitting Linear and Conv1D layers of the patcher's copy by `build(linear)` (a
    Conv1D seen through `as_linear`); returns how many.

    Fitness is judged again on the copy, with each layer's own dtype (an earlier transform may
    have changed it). A layer used twice becomes one quantised module used twice.
    """
    patterns = skip_patterns(params.skip)
    built: dict[int, nn.Module] = {}
    skipped: dict[str, int] = {}

    def match(name: str, module: nn.Module) -> bool:
        if not is_quantisable(module):
            return False
        reason = _skip_reason(name, module, params.min_features, patterns, fits, module.weight.device, module.weight.dtype)
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
        return reason is None

    def make(name: str, module: nn.Module) -> nn.Module:
        if id(module) not in built:
            built[id(module)] = build(as_linear(module))
        return built[id(module)]

    count = replace_modules(model, match, make)
    if not count:
        raise NotApplicable(f"{transform}: no nn.Linear or Conv1D layer to convert ({Selection([], skipped).describe()})")
    logger.info("%s: %d Linear/Conv1D layers converted; skipped: %s", transform, count, Selection([], skipped).describe())
    return count


def _bias_of(linear: nn.Linear, dtype: torch.dtype) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.detach().to(dtype)


def _flatten(x: torch.Tensor, features: int) -> torch.Tensor:
    return x.reshape(-1, features)  # [..., K] -> [M, K]


def _restore(y: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.reshape(*x.shape[:-1], y.shape[-1])  # [M, N] -> [..., N]


# --------------------------------------------------------------------------------------------
# int8 weight-only
# --------------------------------------------------------------------------------------------


def int8_reference_matmul(x2d: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ (q * scales[:, None])^T: the int8 weight dequantised in x's dtype."""
    return F.linear(x2d, q.to(x2d.dtype)) * scales.to(x2d.dtype)  # [M, N]


def int8_kernel_ok(device: torch.device, dtype: torch.dtype, in_features: int) -> bool:
    """Whether `aten._weight_int8pack_mm` serves this device/dtype/K (CPU only: on CUDA it is an
    fp32-only naive kernel, slower than the dequantising matmul)."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return False
    return dtype == torch.float32 or in_features % 16 == 0


def _int8_fits(in_features: int, out_features: int, device: torch.device, dtype: torch.dtype) -> str | None:
    if not dtype.is_floating_point:
        return "not floating point"
    if device.type == "cpu" and not int8_kernel_ok(device, dtype, in_features):
        return f"in_features not a multiple of 16 (the CPU {str(dtype).replace('torch.', '')} int8 kernel needs it)"
    return None


class Int8WeightOnlyLinear(nn.Module):
    """A Linear with an int8 weight (per-row symmetric scales); activations stay floating point."""

    def __init__(self, weight_int8: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight_int8.shape
        self.register_buffer("weight", weight_int8)  # [N, K] int8
        self.register_buffer("scales", scales)  # [N], activation dtype
        self.register_buffer("bias", bias)  # [N] or None

    @classmethod
    def from_linear(cls, linear: nn.Linear, dtype: torch.dtype | None = None) -> "Int8WeightOnlyLinear":
        dtype = dtype or linear.weight.dtype
        q, scales = quantize_int8_rowwise(linear.weight, dtype)
        return cls(q, scales, _bias_of(linear, dtype))

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.weight.to(dtype) * self.scales.to(dtype)[:, None]  # [N, K]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = _flatten(x, self.in_features)  # [M, K]
        scales = self.scales.to(x2d.dtype)
        if int8_kernel_ok(x2d.device, x2d.dtype, self.in_features):
            y = torch.ops.aten._weight_int8pack_mm(x2d.contiguous(), self.weight, scales)  # [M, N]
        else:
            y = int8_reference_matmul(x2d, self.weight, scales)
        return _restore(y, x, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, weight=int8 per-row symmetric"


def head_skips(ctx: TransformContext) -> list[str]:
    """Decoders: the LM head's name as a `skip` value (the Linear giving vocabulary logits, kept in
    its own dtype: its error reaches the logits directly), else nothing."""
    spec = ctx.workload.decoder
    if spec is None:
        return []
    heads = [name for name, m in ctx.workload.model.named_modules() if is_quantisable(m) and structure.out_features(m) == spec.vocab_size]
    return heads[-1:]


def cpu_weight_only_factor(others: list[Step], ctx: TransformContext) -> float:
    """On the CPU the fast weight-only int8/int4 kernels are the bf16 ones: on an fp32 model they
    are 5-12x slower than nn.Linear unless `precision` runs first (measured, torch 2.13, AMX CPU)."""
    if ctx.device.type != "cpu":
        return 1.0
    return 1.5 if any(s.transform == "precision" for s in others) or ctx.dtype == torch.bfloat16 else 0.2


@register_transform
class Int8WeightOnly(Transform):
    name = "int8-weight-only"
    description = "nn.Linear / Conv1D weights in int8 (symmetric, one scale per output row); activations stay in their dtype"
    requires = "a floating-point model; CPU: int8 kernel (bf16/fp16 need in_features % 16 == 0; fast in bf16, slow in fp32: use precision first); CUDA: dequantising matmul that torch.compile fuses"

    @dataclass
    class Params:
        min_features: int = 16
        skip: str = ""  # comma-separated substrings of qualified names to leave alone, e.g. "output"

    order = 30
    acts_on = frozenset({"matmul"})
    exclusive = "weight-format"

    def lossy(self, params: dict) -> bool:
        return True

    def choices(self, ctx: TransformContext) -> list[Choice]:
        # on the GPU Inductor fuses the dequantisation into its decode GEMVs, so int8 weight-only ranks
        # high for decoders (measured: docs/search.md)
        cuda, decoder = ctx.device.type == "cuda", ctx.decoder
        prior = 2.4 if decoder and cuda else 1.6 if decoder else 1.1
        return [Choice(self.name, (), prior)] + [Choice(self.name, (("skip", head),), round(prior * 0.97, 4)) for head in head_skips(ctx)]

    def prior_factor(self, params, others: list[Step], ctx: TransformContext) -> float:
        return cpu_weight_only_factor(others, ctx)

    def check(self, ctx: TransformContext, params) -> None:
        check(ctx.dtype.is_floating_point, "int8 weight-only quantisation needs a floating-point model")
        check_selection(ctx, self.name, params, _int8_fits)

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        convert_linears(model, self.name, params, _int8_fits, Int8WeightOnlyLinear.from_linear)
        return model


# --------------------------------------------------------------------------------------------
# int4 weight-only (group-wise, asymmetric)
# --------------------------------------------------------------------------------------------


def quantize_int4_groupwise(weight: torch.Tensor, group_size: int, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] -> (codes [N, K] uint8 in 0..15, scales_and_zeros [K/group_size, N, 2] in `dtype`).

    Dequantised: W'[n, k] = (codes[n, k] - 8) * scale[g, n] + zero[g, n] with g = k // group_size
    (`kernels.quant.formats.quantize_int4_codes`, the numerics the kernels share).
    """
    codes, scales, zeros = quantize_int4_codes(weight, group_size, dtype)  # [N, K], [N, G] twice
    scales_and_zeros = torch.stack((scales, zeros), dim=-1).transpose(0, 1).contiguous()  # [G, N, 2]
    return codes, scales_and_zeros


def int4_dequantize(packed: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The float weight [N, K] that packed codes and their scales and zeros stand for."""
    dtype = dtype or scales_and_zeros.dtype
    codes = unpack_int4(packed)  # [N, K]
    n, k = codes.shape
    scales = scales_and_zeros[..., 0].t().to(dtype)[..., None]  # [N, G, 1]
    zeros = scales_and_zeros[..., 1].t().to(dtype)[..., None]
    w = (codes.reshape(n, k // group_size, group_size).to(dtype) - 8) * scales + zeros  # [N, G, gs]
    return w.reshape(n, k)


def int4_reference_matmul(x2d: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """x [M, K] @ W'^T with W' dequantised from the plain packed layout, in x's dtype."""
    return F.linear(x2d, int4_dequantize(packed, scales_and_zeros, group_size, x2d.dtype))  # [M, N]


def _tinygemm_inner_k_tiles(in_features: int) -> int:
    return next(t for t in (8, 4, 2) if in_features % (t * 16) == 0)


def int4_layout(device: torch.device, in_features: int, out_features: int, group_size: int) -> str:
    """Which int4 path serves this layer: "cpu", "cuda" (tinygemm) or "reference".

    CPU kernel: N % 16 == 0, K even, group 32/64/128/256, activations fp32/bf16/fp16.
    CUDA tinygemm: compute capability >= 8.0, N % 8 == 0, K % 32 == 0, group 32..256, bf16.
    """
    if group_size not in INT4_GROUP_SIZES or in_features % group_size:
        return "reference"
    if device.type == "cpu" and out_features % 16 == 0 and in_features % 2 == 0:
        return "cpu"
    if device.type == "cuda" and out_features % 8 == 0 and in_features % 32 == 0 and torch.cuda.get_device_capability(device)[0] >= 8:
        return "cuda"
    return "reference"


def _int4_fits_for(group_size: int) -> FitFn:
    def fits(in_features: int, out_features: int, device: torch.device, dtype: torch.dtype) -> str | None:
        if not dtype.is_floating_point:
            return "not floating point"
        if in_features % group_size:
            return f"in_features not a multiple of group_size {group_size}"
        if device.type in ("cpu", "cuda") and int4_layout(device, in_features, out_features, group_size) == "reference":
            return f"out_features not a multiple of {16 if device.type == 'cpu' else 8} (the {device.type} int4 kernel needs it)"
        return None

    return fits


class Int4WeightOnlyLinear(nn.Module):
    """A Linear with a group-wise asymmetric int4 weight; activations stay floating point.

    `weight` is in the layout of the path that runs it: "cpu" (the CPU kernel's packing, uint8
    [N, K/2]), "cuda" (tinygemm's int32 [N/8, K/(16 t), 32, t/2]) or "reference" (plain packed
    uint8 [N, K/2], see `pack_int4`). `scales_and_zeros` is [K/group_size, N, 2].
    """

    def __init__(self, weight: torch.Tensor, scales_and_zeros: torch.Tensor, bias: torch.Tensor | None, in_features: int, out_features: int, group_size: int, layout: str) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.group_size, self.layout = group_size, layout
        self.register_buffer("weight", weight)
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128, layout: str | None = None, dtype: torch.dtype | None = None) -> "Int4WeightOnlyLinear":
        n, k = linear.out_features, linear.in_features
        device = linear.weight.device
        layout = layout or int4_layout(device, k, n, group_size)
        dtype = dtype or linear.weight.dtype
        if layout == "cuda":
            dtype = torch.bfloat16  # tinygemm reads bf16 activations, scales and zeros
        codes, scales_and_zeros = quantize_int4_groupwise(linear.weight, group_size, dtype)
        weight = cls._pack(codes, layout, k)
        return cls(weight, scales_and_zeros, _bias_of(linear, linear.weight.dtype), k, n, group_size, layout)

    @staticmethod
    def _pack(codes: torch.Tensor, layout: str, in_features: int) -> torch.Tensor:
        if layout == "cpu":
            return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)  # [N, K/2] uint8
        if layout == "cuda":
            return torch.ops.aten._convert_weight_to_int4pack(pack_int4(codes), _tinygemm_inner_k_tiles(in_features))
        if layout == "reference":
            return pack_int4(codes)
        raise ValueError(f"unknown int4 layout {layout!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = _flatten(x, self.in_features)  # [M, K]
        if self.layout == "cpu":
            sz = self.scales_and_zeros.to(x2d.dtype)
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2d.contiguous(), self.weight, self.group_size, sz)
        elif self.layout == "cuda":
            sz = self.scales_and_zeros.to(torch.bfloat16)
            y = torch.ops.aten._weight_int4pack_mm(x2d.to(torch.bfloat16).contiguous(), self.weight, self.group_size, sz).to(x.dtype)
        else:
            y = int4_reference_matmul(x2d, self.weight, self.scales_and_zeros, self.group_size)
        return _restore(y, x, self.bias)  # [..., N]

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"weight=int4 asymmetric, group_size={self.group_size}, layout={self.layout}"
        )


@register_transform
class Int4WeightOnly(Transform):
    name = "int4-weight-only"
    description = "nn.Linear / Conv1D weights in int4 (asymmetric, a scale and zero per group of input features, two per byte)"
    requires = (
        "CPU: out_features % 16 == 0, fp32/bf16/fp16; CUDA: sm80+, out_features % 8 == 0, runs in bf16 (tinygemm); "
        "in_features a multiple of group_size (32, 64, 128 or 256), other layers are left alone"
    )

    @dataclass
    class Params:
        group_size: int = 128
        min_features: int = 16
        skip: str = ""

    order = 30
    acts_on = frozenset({"matmul"})
    exclusive = "weight-format"

    def lossy(self, params: dict) -> bool:
        return True

    def choices(self, ctx: TransformContext) -> list[Choice]:
        # smaller groups keep more of each weight (error ~ group range / 30) and read more scales:
        # 128 first, then 64 and 32, which the verification may keep where 128 fails
        base = 2.0 if ctx.decoder else 1.0
        skips = [("", 1.0)] + [(head, 0.97) for head in head_skips(ctx)]  # the LM head kept: fewer bytes saved
        return [Choice(self.name, (("group_size", g), ("skip", skip)), round(base * f * fs, 4)) for skip, fs in skips for g, f in ((128, 1.0), (64, 0.98), (32, 0.95))]

    def prior_factor(self, params, others: list[Step], ctx: TransformContext) -> float:
        return cpu_weight_only_factor(others, ctx)

    def check(self, ctx: TransformContext, params) -> None:
        check(params.group_size in INT4_GROUP_SIZES, f"int4 group_size must be one of {', '.join(map(str, INT4_GROUP_SIZES))} (the int4 kernels' choices), not {params.group_size}")
        check(ctx.dtype.is_floating_point, "int4 weight-only quantisation needs a floating-point model")
        check(ctx.device.type != "cuda" or torch.cuda.get_device_capability(ctx.device)[0] >= 8, "the CUDA int4 kernel (tinygemm) needs an Ampere or newer GPU")
        check_selection(ctx, self.name, params, _int4_fits_for(params.group_size))

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        build = lambda linear: Int4WeightOnlyLinear.from_linear(linear, params.group_size)  # noqa: E731
        convert_linears(model, self.name, params, _int4_fits_for(params.group_size), build)
        return model


# --------------------------------------------------------------------------------------------
# dynamic int8 (CPU, torch.ao)
# --------------------------------------------------------------------------------------------


def _dynamic_quantizer():
    """torch.ao's quantize_dynamic and per-channel qconfig, or None when this torch lacks them."""
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:
        return None
    return quantize_dynamic, per_channel_dynamic_qconfig


def _dynamic_fits(in_features: int, out_features: int, device: torch.device, dtype: torch.dtype) -> str | None:
    return None if dtype == torch.float32 else "not fp32"


class DynamicInt8Linear(nn.Module):
    """torch's dynamically quantised Linear (qint8 per-channel weights, activations quantised per
    call), wrapped to be built from a Linear without touching it. Its weight lives in torch's
    packed parameters (`qlinear._packed_params`), the form its int8 GEMM reads."""

    def __init__(self, qlinear: nn.Module) -> None:
        super().__init__()
        self.qlinear = qlinear
        self.in_features, self.out_features = qlinear.in_features, qlinear.out_features

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "DynamicInt8Linear":
        found = _dynamic_quantizer()
        if found is None:
            raise RuntimeError("this torch has no torch.ao.quantization.quantize_dynamic")
        quantize_dynamic, qconfig = found
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's deprecation notices
            # inplace=False: quantize_dynamic deep-copies this one layer before converting the
            # copy, so the Linear (and the user's weight tensor it shares) stays as it was
            quantized = quantize_dynamic(nn.Sequential(linear), {nn.Linear: qconfig}, dtype=torch.qint8, inplace=False)
        return cls(quantized[0])

    @property
    def weight(self) -> None:
        """No float weight to read: code that checks a Linear's weight before calling it (T5's
        feed-forward casts its input to `wo.weight.dtype` when the weight is a tensor) sees none
        and leaves the input as it is, which is what this layer takes."""
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.qlinear(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weight=qint8 per-channel, activations=dynamic uint8"


@register_transform
class DynamicInt8(Transform):
    name = "dynamic-int8"
    description = "CPU: torch's dynamic int8 Linear for nn.Linear / Conv1D layers (qint8 per-channel weights, activations quantised at run time)"
    requires = "the CPU, an fp32 model and torch.ao.quantization (fbgemm/oneDNN/qnnpack engine)"

    @dataclass
    class Params:
        min_features: int = 16
        skip: str = ""

    order = 20
    acts_on = frozenset({"matmul"})
    exclusive = "weight-format"

    def lossy(self, params: dict) -> bool:
        return True

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.6 if ctx.device.type == "cpu" and ctx.dtype == torch.float32 else 1.0)]

    def conflict(self, params, others: list[Step], ctx: TransformContext) -> str | None:
        if any(s.transform == "precision" for s in others):
            return "dynamic int8 quantises an fp32 model's Linears; precision would change them first"
        return None

    def check(self, ctx: TransformContext, params) -> None:
        check(ctx.device.type == "cpu", f"dynamic int8 quantisation runs on CPU int8 kernels (fbgemm/oneDNN); this run is on {ctx.device.type.upper()}")
        check(ctx.dtype == torch.float32, f"dynamic int8 quantisation takes fp32 models, this one is {str(ctx.dtype).replace('torch.', '')}")
        check(_dynamic_quantizer() is not None, "this torch has no torch.ao.quantization.quantize_dynamic")
        check(torch.backends.quantized.engine not in (None, "none"), "no quantized engine (fbgemm, x86, onednn or qnnpack) in this torch build")
        check_selection(ctx, self.name, params, _dynamic_fits)

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        convert_linears(model, self.name, params, _dynamic_fits, DynamicInt8Linear.from_linear)
        return model


# --------------------------------------------------------------------------------------------
# fp8 (row-wise scaled float8_e4m3fn)
# --------------------------------------------------------------------------------------------


def quantize_fp8_rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """t [R, C] -> (t_fp8 [R, C] float8_e4m3fn, scales [R, 1] fp32) with t ~= t_fp8 * scales."""
    tf = t.float()
    scales = (tf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)  # [R, 1]
    return (tf / scales).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scales


def _fp8_fits(in_features: int, out_features: int, device: torch.device, dtype: torch.dtype) -> str | None:
    if in_features % 16 or out_features % 16:
        return "features not multiples of 16 (torch._scaled_mm needs it)"
    return None


class Fp8Linear(nn.Module):
    """A Linear with a float8_e4m3fn weight (one fp32 scale per output row); activations quantised
    per row to float8 at run time; `torch._scaled_mm` with row-wise scales, bf16 out, cast back."""

    def __init__(self, weight_fp8: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight_fp8.shape
        self.register_buffer("weight", weight_fp8)  # [N, K] float8_e4m3fn
        self.register_buffer("weight_scale", weight_scale)  # [1, N] fp32
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Fp8Linear":
        w8, scales = quantize_fp8_rowwise(linear.weight.detach())  # [N, K], [N, 1]
        return cls(w8.contiguous(), scales.t().contiguous(), _bias_of(linear, linear.weight.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = _flatten(x, self.in_features).contiguous()  # [M, K], row-major as _scaled_mm needs
        x8, x_scale = quantize_fp8_rowwise(x2d)  # [M, K], [M, 1]
        # mat2 column-major: the [N, K] row-major weight transposed
        y = torch._scaled_mm(x8, self.weight.t(), scale_a=x_scale, scale_b=self.weight_scale, out_dtype=torch.bfloat16)
        return _restore(y.to(x.dtype), x, self.bias)  # [..., N]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, weight=float8_e4m3fn row-wise"


@register_transform
class Fp8(Transform):
    name = "fp8"
    description = "nn.Linear / Conv1D in float8 (e4m3): weights and per-call activations with row-wise scales, torch._scaled_mm"
    requires = "an NVIDIA GPU of compute capability 8.9+ (Ada, Hopper) and a bf16/fp16 model; features multiples of 16"

    @dataclass
    class Params:
        min_features: int = 16
        skip: str = ""

    order = 30
    acts_on = frozenset({"matmul"})
    exclusive = "weight-format"

    def lossy(self, params: dict) -> bool:
        return True

    def choices(self, ctx: TransformContext) -> list[Choice]:
        prior = 1.5 if ctx.device.type == "cuda" else 1.0
        return [Choice(self.name, (), prior)] + [Choice(self.name, (("skip", head),), round(prior * 0.97, 4)) for head in head_skips(ctx)]

    def check(self, ctx: TransformContext, params) -> None:
        check(hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"), "this torch has no torch._scaled_mm / float8_e4m3fn")
        if not (_FP8_ALLOW_CPU and ctx.device.type == "cpu"):
            check(ctx.device.type == "cuda", f"fp8 matmuls need a CUDA GPU of compute capability 8.9+ (Ada/Hopper); this run is on {ctx.device.type.upper()}")
            cap = torch.cuda.get_device_capability(ctx.device)
            check(cap >= (8, 9), f"fp8 matmuls need CUDA compute capability 8.9+ (Ada/Hopper); this GPU is {cap[0]}.{cap[1]}")
        check(ctx.dtype in (torch.bfloat16, torch.float16), f"fp8 takes bf16/fp16 models, this one is {str(ctx.dtype).replace('torch.', '')}")
        check_selection(ctx, self.name, params, _fp8_fits)

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        convert_linears(model, self.name, params, _fp8_fits, Fp8Linear.from_linear)
        return model


# --------------------------------------------------------------------------------------------
# 2:4 semi-structured sparsity
# --------------------------------------------------------------------------------------------


def prune_2of4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the 2 largest magnitudes of every 4 consecutive input features.

    weight [N, K] (K % 4 == 0) -> (pruned [N, K], a new tensor; mask [N, K] bool, exactly two
    True in each group of four). Ties go to the lower index.
    """
    n, k = weight.shape
    if k % 4:
        raise ValueError(f"2:4 pruning needs in_features divisible by 4, got {k}")
    groups = weight.detach().abs().float().reshape(n, k // 4, 4)  # [N, K/4, 4]
    keep = groups.topk(2, dim=-1, sorted=False).indices  # [N, K/4, 2]
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True).reshape(n, k)
    return weight.detach() * mask, mask


def _sparse_class():
    """The semi-structured backend torch will use: cuSPARSELt where present, else CUTLASS."""
    from torch.sparse import SparseSemiStructuredTensor, SparseSemiStructuredTensorCUSPARSELT, SparseSemiStructuredTensorCUTLASS

    cusparselt = getattr(torch.backends, "cusparselt", None)
    if not SparseSemiStructuredTensor._FORCE_CUTLASS and cusparselt is not None and cusparselt.is_available():
        return SparseSemiStructuredTensorCUSPARSELT
    return SparseSemiStructuredTensorCUTLASS


def _sparse_fits(in_features: int, out_features: int, device: torch.device, dtype: torch.dtype) -> str | None:
    if dtype not in (torch.float16, torch.bfloat16):
        return "not fp16/bf16"
    limits = _sparse_class()._DTYPE_SHAPE_CONSTRAINTS[dtype]
    rows, cols = limits.sparse_min_rows, limits.sparse_min_cols
    if out_features % rows or in_features % cols:
        return f"shape not a multiple of ({rows}, {cols}) (the semi-structured kernel needs it)"
    return None


class SemiSparseLinear(nn.Module):
    """A Linear whose weight is pruned 2:4 and held compressed (`to_sparse_semi_structured`)."""

    def __init__(self, weight_sparse: torch.Tensor, bias: torch.Tensor | None, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", weight_sparse)  # SparseSemiStructuredTensor [N, K]
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "SemiSparseLinear":
        pruned, _ = prune_2of4(linear.weight)
        sparse = _sparse_class().from_dense(pruned.contiguous())
        return cls(sparse, _bias_of(linear, linear.weight.dtype), linear.in_features, linear.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = _flatten(x, self.in_features)  # [M, K]
        return _restore(F.linear(x2d, self.weight), x, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, weight=2:4 semi-structured"


@register_transform
class Sparsity2of4(Transform):
    name = "sparsity-2of4"
    description = "nn.Linear / Conv1D weights pruned 2:4 (2 largest of every 4) and run as semi-structured sparse; changes the function, verification decides"
    requires = "a CUDA GPU of compute capability 8.0+ (Ampere or newer), an fp16/bf16 model, Linear shapes multiples of the kernel's tile"

    @dataclass
    class Params:
        min_features: int = 16
        skip: str = ""

    order = 30
    acts_on = frozenset({"matmul"})
    exclusive = "weight-format"

    def lossy(self, params: dict) -> bool:
        return True

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.2 if ctx.device.type == "cuda" else 1.0)]

    def check(self, ctx: TransformContext, params) -> None:
        check(ctx.device.type == "cuda", f"2:4 semi-structured sparse kernels run on CUDA GPUs (Ampere or newer); this run is on {ctx.device.type.upper()}")
        check(torch.cuda.get_device_capability(ctx.device)[0] >= 8, "2:4 semi-structured sparsity needs an Ampere or newer GPU (compute capability 8.0+)")
        check(hasattr(torch.sparse, "to_sparse_semi_structured"), "this torch has no torch.sparse.to_sparse_semi_structured")
        check(ctx.dtype in (torch.float16, torch.bfloat16), f"2:4 sparsity takes fp16/bf16 models, this one is {str(ctx.dtype).replace('torch.', '')}")
        check_selection(ctx, self.name, params, _sparse_fits)

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        convert_linears(model, self.name, params, _sparse_fits, SemiSparseLinear.from_linear)
        return model

"""`triton-kernels`: Agnitra's own Triton kernels in the model.

- `weights`: "int8" / "int4" quantise eligible nn.Linear layers into kernel-backed modules (GEMV
  for decode batches, tiled for larger ones); "keep" leaves float Linears alone but still moves
  `int8-weight-only` modules of an earlier step onto the kernels (same format, no copy). int4
  layers of a 16-bit model keep their weights once, pre-shuffled for the tensor-core GEMV (batch
  1-8), which the tiled kernel (larger batches) reads too; a layer whose batch-1 GEMV is the row
  kernel (small layers, where it is faster) keeps the packed bytes it reads as well.
- `norms`: RMSNorm (ours, and any module that computes it: transformers' Llama/Mistral/Qwen/T5
  norms, recognised by behaviour on a probe input, `structure.rms_norm_eps`) and nn.LayerNorm
  through the fused norm kernels; in our Llama the residual add is fused into the FFN norm (one
  pass over the hidden state instead of two).
- `mlp`: Llama's silu(w1 x) * w3 x gating in one kernel, and any module that computes
  down(silu(gate x) * up x) with three bias-free Linears (transformers' Llama/Mistral/Qwen MLPs,
  by behaviour, `structure.gated_mlp_parts`); a transformers encoder's Linear + exact GELU (BERT's
  intermediate layer) as one matmul-template launch with bias and GELU in its epilogue.
- `fuse`: Llama's wq|wk|wv and w1|w3, and a transformers encoder's q|k|v, stacked into one Linear
  each, kernel-backed for int8/int4 (launch-bound steps: two or three launches fewer per layer);
  with weights=keep, also the float projection groups `fuse-projections` finds by structure
  (those of a gated MLP the kernel took stay separate).
- `decode`: each Llama block's decode steps in five fused kernels (`kernels.decode_layer`: norm
  folded into the projections, rotary + cache write and residual adds in their epilogues, one
  attention kernel), the final norm folded into the LM head. Needs stacked projections and int8
  (or float) weights: otherwise the transform says why rather than skip it (decode=false opts out).
Kernels run as custom operators (torch.compile and CUDA graphs keep them whole) with their
configurations from the per-device tuning cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agnitra.errors import NotApplicable, check
from agnitra.kernels.spec import triton_available
from agnitra.transforms.base import Choice, Step, Transform, TransformContext, register_transform, replace_modules
from agnitra.transforms.fuse_projections import stack_projections, stackable_targets
from agnitra.transforms.structure import find_projection_groups, gated_mlp_parts, rms_norm_eps, stack_groups

WEIGHT_MODES = ("keep", "int8", "int4")


class _GatedParts:
    """What `TritonFeedForward` reads of a Llama FeedForward, from a module found by behaviour."""

    def __init__(self, gate: nn.Module, up: nn.Module, down: nn.Module) -> None:
        self.w1, self.w3, self.w2 = gate, up, down


def _fits(params):
    """int4 groups run along K: a layer whose K is not a multiple of group_size is left alone."""

    def fits(k: int, n: int, device, dtype) -> str | None:
        if params.weights == "int4" and k % params.group_size:
            return f"in_features not a multiple of group_size {params.group_size}"
        return None

    return fits


def _convert_float_linears(model: nn.Module, params) -> int:
    """Quantise the eligible nn.Linear layers (skip=, min_features= as the quantize transforms)."""
    from agnitra.kernels import modules as km
    from agnitra.transforms.quantize import convert_linears

    if params.weights == "int8":
        build = km.TritonInt8Linear.from_linear
    else:
        build = lambda linear: km.TritonInt4Linear.from_linear(linear, params.group_size)  # noqa: E731
    try:
        return convert_linears(model, TritonKernels.name, params, _fits(params), build)
    except NotApplicable:
        return 0  # no Linear fits; norms and the MLP may still be replaced


def _use_decode_kernels(model: nn.Module) -> int:
    """Llama blocks (and the head) onto the fused decode kernels; NotApplicable naming the blocker."""
    from agnitra.kernels import decode_modules as dm
    from agnitra.kernels.modules import TritonLlamaBlock
    from agnitra.models.llama import Block

    blocks = [m for m in model.modules() if isinstance(m, (Block, TritonLlamaBlock))]
    blockers = sorted({b for m in blocks if (b := dm.decode_block_blocker(m)) is not None})
    if blockers:
        raise NotApplicable(f"decode=true: {blockers[0]}; set decode=false to keep the unfused decode step")
    count = replace_modules(model, lambda n, m: isinstance(m, (Block, TritonLlamaBlock)), lambda n, m: dm.TritonDecodeBlock(m))
    return count + (dm.fold_head_norm(model) if count else 0)


@register_transform
class TritonKernels(Transform):
    name = "triton-kernels"
    description = "Agnitra's Triton kernels: int8/int4 weight-only GEMV/GEMM, fused RMSNorm/LayerNorm (+ residual), fused gated MLP"
    requires = "Triton and a CUDA GPU (TRITON_INTERPRET=1 runs them on the CPU, slowly, for tests)"

    @dataclass
    class Params:
        weights: str = "int8"  # keep | int8 | int4
        group_size: int = 128
        norms: bool = True
        mlp: bool = True
        fuse: bool = True
        decode: bool = True
        min_features: int = 16
        skip: str = ""  # comma-separated qualified-name parts to leave as they are (e.g. "output")

    order = 40
    acts_on = frozenset({"matmul", "norm"})

    def lossy(self, params: dict) -> bool:
        return params.get("weights", "int8") != "keep"

    def choices(self, ctx: TransformContext) -> list[Choice]:
        if ctx.device.type != "cuda":
            return [Choice(self.name)]  # check() says why it does not apply
        decoder = ctx.decoder
        # quantised GEMVs read 2-4x fewer bytes in decode steps; decode=true: five fused kernels a Llama
        # layer, faster than int8 through Inductor (measured: docs/search.md)
        return [
            Choice(self.name, (("weights", "int8"),), 3.2 if decoder else 1.1),
            # int4 reads half of int8's bytes but rarely keeps logits within 20 dB SQNR: tried after int8
            Choice(self.name, (("weights", "int4"), ("decode", False)), 2.0 if decoder else 1.0),
            # float weights: stacked q|k|v and, in encoders, Linear+GELU as one matmul-template launch;
            # encoders keep their LayerNorms with Inductor, which fuses the residual add into them:
            # bert-base b1 fp16 0.463 ms vs 0.569 for compile reduce-overhead alone (H100)
            Choice(self.name, (("weights", "keep"), ("decode", False), ("norms", decoder)), 1.15 if decoder else 2.0),
        ]

    def conflict(self, params, others: list[Step], ctx: TransformContext) -> str | None:
        from agnitra.transforms.base import get_transform

        names = {s.transform for s in others}
        if params.weights != "keep" and any(get_transform(n).exclusive == "weight-format" for n in names):
            return "two weight quantisers"
        if params.weights == "keep" and "int8-weight-only" in names:
            return "the same model as triton-kernels(weights=int8)"
        # the kernels stack float projections as fuse-projections does, and quantised ones only on the
        # class-specific paths: before int8/int4 on other models fuse-projections is what stacks them
        if params.fuse and "fuse-projections" in names and (params.weights == "keep" or any(stackable_targets(m) for m in ctx.workload.model.modules())):
            return "the kernels stack the projections themselves (fuse=true): the same model"
        if any(get_transform(n).stage == "backend" for n in names):
            return "the kernels do not export to ONNX"
        return None

    def check(self, ctx: TransformContext, params) -> None:
        check(params.weights in WEIGHT_MODES, f"weights must be one of {', '.join(WEIGHT_MODES)}, not {params.weights!r}")
        usable, reason = triton_available(ctx.device)
        check(usable, reason)
        check(ctx.dtype.is_floating_point, "the kernels take floating-point activations")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        from agnitra.kernels import modules as km
        from agnitra.models.llama import Block, FeedForward, RMSNorm, StackedFeedForward, linears_stack, stack_linears
        from agnitra.transforms.quantize import Int8WeightOnlyLinear

        count = replace_modules(model, lambda n, m: isinstance(m, Int8WeightOnlyLinear), lambda n, m: km.TritonInt8Linear.from_int8_module(m))
        if params.weights != "keep":
            count += _convert_float_linears(model, params)
        if params.mlp:  # before the structural stacking: a gated MLP's gate|up go to the gating kernel
            count += replace_modules(model, lambda n, m: type(m) is not FeedForward and gated_mlp_parts(m) is not None, lambda n, m: km.TritonFeedForward(_GatedParts(*gated_mlp_parts(m))))
        if params.fuse:  # what fuse-projections does before quantisation, here on the kernels' modules
            count += stack_projections(model, km.stackable, km.concat_outputs)
            if params.weights == "keep":  # float projections: stacked as fuse-projections stacks them
                count += stack_projections(model, linears_stack, stack_linears)
                if not any(stackable_targets(m) for m in ctx.workload.model.modules()):
                    count += stack_groups(model, find_projection_groups(ctx.workload.model, ctx.workload.example_inputs).groups)
        if params.mlp:
            count += replace_modules(model, lambda n, m: type(m) is FeedForward, lambda n, m: km.TritonFeedForward(m))
            count += replace_modules(model, lambda n, m: type(m) is StackedFeedForward, lambda n, m: km.TritonStackedFeedForward(m.w13, m.w2))
            count += replace_modules(model, lambda n, m: km.linear_then_gelu(m) is not None, lambda n, m: km.TritonLinearGELU(km.linear_then_gelu(m)))
        if params.norms:
            count += replace_modules(model, lambda n, m: isinstance(m, Block), lambda n, m: km.TritonLlamaBlock(m))
            count += replace_modules(model, lambda n, m: isinstance(m, RMSNorm), lambda n, m: km.TritonRMSNorm(m.weight, m.eps))
            count += replace_modules(model, lambda n, m: rms_norm_eps(m) is not None, lambda n, m: km.TritonRMSNorm(m.weight, rms_norm_eps(m)))
            count += replace_modules(model, lambda n, m: isinstance(m, nn.LayerNorm) and m.weight is not None and len(m.normalized_shape) == 1, lambda n, m: km.TritonLayerNorm(m))
        if params.decode:
            count += _use_decode_kernels(model)
        if count == 0:
            raise NotApplicable("no Linear, norm or MLP module the kernels replace (check weights=, skip= and min_features=)")
        return model

    def notes(self, ctx: TransformContext, params) -> list[str]:
        """Whether the kernels launch with programmatic dependent launch here (`kernels.pdl`); what
        int4 layers keep in memory where the tensor-core GEMV's copy of their weights is made."""
        from agnitra.kernels.pdl import pdl_note, pdl_unavailable

        notes = []
        if params.weights == "int4" and ctx.dtype in (torch.float16, torch.bfloat16) and params.group_size % 64 == 0:
            notes.append("triton-kernels: int4 layers keep their weights once, pre-shuffled for the tensor-core GEMV; layers whose batch-1 GEMV"
                         " is the row kernel (small layers, where it is faster) also keep the packed bytes it reads, a second copy"
                         " (twice the packed int4 bytes for those layers: each says which it keeps in the model's repr)")
        if ctx.device.type == "cuda":
            notes.append(pdl_note("triton-kernels", pdl_unavailable(ctx.device),
                                  "the GEMV, decode-layer, norm and gated-activation kernels launch with programmatic dependent launch"))
        return notes

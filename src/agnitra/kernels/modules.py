"""Modules backed by Agnitra's kernels: drop-in replacements the `triton-kernels` transform uses.

Each keeps the call semantics of the module it replaces ([..., in] -> [..., out] for Linears,
[..., N] for norms) and runs its work through the custom operators of `kernels.ops`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from agnitra.kernels import ops
from agnitra.models.llama import StackedFeedForward


def _flat(x: torch.Tensor, k: int) -> torch.Tensor:
    return x.reshape(-1, k)  # [M, K]


class _SplitKLinear(nn.Module):
    """A kernel-backed Linear whose GEMVs may split K: the split-K arrival counters (and slots, where
    its GEMVs take them) of the device its weight lives on are reserved when it is built and whenever
    it moves (`.to()`), never on a first call, which may run inside a CUDA graph capture whose pool
    refuses allocations that outlive it."""

    def _reserve_counters(self) -> None:
        from agnitra.kernels.quant.split_k import reserve_split_k_counters

        reserve_split_k_counters(self.scales.device)

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        self._reserve_counters()
        return module


class TritonInt8Linear(_SplitKLinear):
    """y = (x @ W_int8^T) * scales (+ bias): int8 weights per output channel, GEMV or tiled kernel."""

    def __init__(self, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", weight)  # [N, K] int8
        self.register_buffer("scales", scales)  # [N]
        self.register_buffer("bias", bias)
        self._reserve_counters()

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "TritonInt8Linear":
        from agnitra.kernels.quant.int8 import quantize_int8_per_channel

        q, scales = quantize_int8_per_channel(linear.weight.detach(), linear.weight.dtype)
        bias = linear.bias.detach() if linear.bias is not None else None
        return cls(q, scales, bias, linear.in_features, linear.out_features)

    @classmethod
    def from_int8_module(cls, module) -> "TritonInt8Linear":
        """An `Int8WeightOnlyLinear` of the quantize transform: the same format, buffers shared."""
        return cls(module.weight, module.scales, module.bias, module.in_features, module.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = ops.int8_weight_only_linear(_flat(x, self.in_features).contiguous(), self.weight, self.scales.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, weight=int8 per-channel, kernel=triton"


def _batch1_reads_packed(n: int, k: int, group_size: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a layer's batch-1 int4 GEMV (tuned on this device, else the default) is a kernel over the
    packed bytes (the row kernel of small layers) rather than the tensor-core GEMV over the words."""
    return ops.config_for("int4_gemv", (1, n, k, group_size), dtype, device.type).get("KERNEL") != "tc"


def _waiting_fixup_slots(n: int, k: int, group_size: int, dtype: torch.dtype, device: torch.device) -> int:
    """The split-K slots a layer's GEMVs need where their tuned configs (batch buckets 1 to 8) take the
    one-round-trip fix-up (FIXUP "wait"): (SPLIT_K - 1) x batch x N at most, 0 where none does."""
    need = 0
    for m in (1, 2, 4, 8):
        config = ops.config_for("int4_gemv", (m, n, k, group_size), dtype, device.type)
        if config.get("FIXUP") == "wait":
            need = max(need, (config["SPLIT_K"] - 1) * m * n)
    return need


class TritonInt4Linear(_SplitKLinear):
    """Group-wise asymmetric int4 weights; GEMV or tiled kernel.

    The weight is kept once where it can be: as the tensor-core GEMV's words (16-bit models, K and
    the group size multiples of 64), which the tiled kernel reads too; `weight` is then None. A
    layer whose batch-1 GEMV reads the packed bytes (the row kernel of small layers) keeps those as
    `weight` [N, K/2] beside the words; fp32 layers keep only the packed bytes. The state dict
    always holds the packed bytes as "weight", and loading one remakes the words and (s, z) pairs.
    """

    def _reserve_counters(self) -> None:
        """The counters, and the slots of the one-round-trip fix-up where the layer's tuned GEMVs take it."""
        from agnitra.kernels.quant.split_k import reserve_split_k_slots

        super()._reserve_counters()
        slots = _waiting_fixup_slots(self.out_features, self.in_features, self.group_size, self.scales.dtype, self.scales.device)
        if slots:
            reserve_split_k_slots(self.scales.device, slots)

    def __init__(self, weight, scales, zeros, bias, in_features: int, out_features: int, group_size: int) -> None:
        super().__init__()
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        self.register_buffer("scales", scales)  # [N, K/G]
        self.register_buffer("zeros", zeros)  # [N, K/G]
        self.register_buffer("bias", bias)
        # the tensor-core GEMV's operands, made here rather than on a first call inside a CUDA graph
        # capture (not saved: remade from the weights); None where that kernel cannot run
        from agnitra.kernels.quant.int4_tc import int4_tc_operands

        self._reserve_counters()
        words, pairs = int4_tc_operands(weight, scales, zeros, group_size)
        keep_packed = words is None or _batch1_reads_packed(out_features, in_features, group_size, scales.dtype, scales.device)
        self.register_buffer("weight", weight if keep_packed else None)  # [N, K/2] uint8, low nibble = even k
        self.register_buffer("tc_words", words, persistent=False)
        self.register_buffer("tc_scales", pairs, persistent=False)
        self.tc_dtype = scales.dtype  # the activations' dtype the (s, z) pairs are made for

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int) -> "TritonInt4Linear":
        from agnitra.kernels.quant.int4 import quantize_int4_groupwise

        packed, scales, zeros = quantize_int4_groupwise(linear.weight.detach(), group_size, linear.weight.dtype)
        bias = linear.bias.detach() if linear.bias is not None else None
        return cls(packed, scales, zeros, bias, linear.in_features, linear.out_features, group_size)

    @property
    def packed_weight(self) -> torch.Tensor:
        """The codes as `pack_int4` bytes [N, K/2]: `weight`, or unshuffled from the words (a new tensor)."""
        from agnitra.kernels.quant.int4_tc import unshuffle_int4_from_tc

        return self.weight if self.weight is not None else unshuffle_int4_from_tc(self.tc_words, self.out_features)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.weight is None:
            destination[prefix + "weight"] = self.packed_weight

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        key = prefix + "weight"
        if self.weight is not None:
            packed = self.weight  # loaded in place by the base class
        elif key in state_dict:
            if key in unexpected_keys:
                unexpected_keys.remove(key)
            packed = state_dict[key]
            expected = (self.out_features, self.in_features // 2)
            if tuple(packed.shape) != expected or packed.dtype != torch.uint8:
                error_msgs.append(f"size mismatch for {key}: int4 packed bytes must be uint8 {list(expected)}, got {list(packed.shape)} {packed.dtype}")
                return
        else:
            missing_keys.append(key)
            return
        self._remake_tc_operands(packed.to(self.scales.device))

    def _remake_tc_operands(self, packed: torch.Tensor) -> None:
        """The words and (s, z) pairs of newly loaded weights, written into the buffers in place."""
        from agnitra.kernels.quant.int4_tc import int4_tc_operands

        if self.tc_words is None:
            return
        words, pairs = int4_tc_operands(packed, self.scales, self.zeros, self.group_size)
        with torch.no_grad():
            self.tc_words.copy_(words)
            self.tc_scales.copy_(pairs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        x2d, bias = _flat(x, self.in_features).contiguous(), None if self.bias is None else self.bias.to(dt)
        pairs = self.tc_scales if self.tc_scales is not None and dt == self.tc_dtype else None
        if self.weight is None:
            y = ops.int4_words_linear(x2d, self.tc_words, self.scales.to(dt), self.zeros.to(dt), self.group_size, bias, pairs)
        else:
            tc = (self.tc_words, pairs) if pairs is not None else (None, None)
            y = ops.int4_weight_only_linear(x2d, self.weight, self.scales.to(dt), self.zeros.to(dt), self.group_size, bias, *tc)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        kept = "packed" if self.tc_words is None else "tensor-core words" if self.weight is None else "packed + tensor-core words"
        return f"in_features={self.in_features}, out_features={self.out_features}, group_size={self.group_size}, weight=int4 ({kept}), kernel=triton"


class TritonRMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(x.contiguous(), self.weight, self.eps)


class TritonLayerNorm(nn.Module):
    def __init__(self, norm: nn.LayerNorm) -> None:
        super().__init__()
        self.weight, self.bias, self.eps = norm.weight, norm.bias, norm.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.layer_norm(x.contiguous(), self.weight, self.bias, self.eps)


class TritonFeedForward(nn.Module):
    """Llama's w2(silu(w1 x) * w3 x) with the gating in one kernel (w1, w3, w2 kept as they are)."""

    def __init__(self, ff: nn.Module) -> None:
        super().__init__()
        self.w1, self.w2, self.w3 = ff.w1, ff.w2, ff.w3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(ops.gated_activation(self.w1(x).contiguous(), self.w3(x).contiguous(), "silu"))


def linear_then_gelu(module: nn.Module) -> nn.Linear | None:
    """The Linear of a transformers `*Intermediate` (BERT family) that computes exact gelu(dense(x)), else None."""
    cls, act = type(module), getattr(module, "intermediate_act_fn", None)
    if not (cls.__module__.startswith("transformers.") and cls.__name__.endswith("Intermediate")):
        return None
    dense = getattr(module, "dense", None)
    exact_gelu = type(act).__name__ == "GELUActivation" and getattr(act, "act", None) is F.gelu
    return dense if type(dense) is nn.Linear and dense.weight.is_floating_point() and exact_gelu else None


class TritonLinearGELU(nn.Module):
    """gelu(x W^T + b) in one matmul-template launch with the bias and exact GELU in its epilogue."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = ops.linear_gelu(_flat(x, self.in_features).contiguous(), self.weight, self.bias)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, gelu"


def stackable(linears: list[nn.Module]) -> bool:
    """Kernel-backed Linears of one kind (int8, or int4 of one group size), input size and bias use."""
    first = linears[0]
    return (
        type(first) in (TritonInt8Linear, TritonInt4Linear)
        and all(type(m) is type(first) and m.in_features == first.in_features for m in linears)
        and len({m.bias is None for m in linears}) == 1
        and len({getattr(m, "group_size", None) for m in linears}) == 1
    )


def concat_outputs(linears: list[nn.Module]) -> nn.Module:
    """One kernel-backed Linear computing the outputs of several over the same input, side by side.

    Output channels are independent rows (per-row int8 scales; int4 groups run along K), so
    stacking the rows of `stackable` Linears gives the same numbers in one launch.
    """
    if not stackable(linears):
        raise ValueError("concat_outputs: the Linears must be kernel-backed, of one kind, input size and bias use")
    first, n = linears[0], sum(m.out_features for m in linears)
    cat = lambda name: torch.cat([getattr(m, name) for m in linears]) if getattr(first, name) is not None else None  # noqa: E731
    if isinstance(first, TritonInt8Linear):
        return TritonInt8Linear(cat("weight"), cat("scales"), cat("bias"), first.in_features, n)
    packed = torch.cat([m.packed_weight for m in linears])  # words of row counts not multiples of 16 do not stack
    return TritonInt4Linear(packed, cat("scales"), cat("zeros"), cat("bias"), first.in_features, n, first.group_size)


class TritonStackedFeedForward(StackedFeedForward):
    """Stacked w1|w3 (kernel-backed) with the gating read from its output in place by one kernel."""

    def gate(self, ab: torch.Tensor) -> torch.Tensor:
        return ops.gated_activation_packed(ab.contiguous(), "silu")


class TritonLlamaBlock(nn.Module):
    """Llama block with the residual add fused into the FFN norm: one pass instead of two."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.attention_norm, self.attention = block.attention_norm, block.attention
        self.ffn_norm, self.feed_forward = block.ffn_norm, block.feed_forward

    def forward(self, x, cos, sin, mask, input_pos):
        attn = self.attention(self.attention_norm(x), cos, sin, mask, input_pos)
        normed, h = ops.add_rms_norm(attn.contiguous(), x.contiguous(), self.ffn_norm.weight, self.ffn_norm.eps)
        return h + self.feed_forward(normed)

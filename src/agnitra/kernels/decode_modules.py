"""Llama modules whose decode steps run on `kernels.decode_layer`: five launches a layer.

`TritonDecodeBlock` replaces a Llama block whose projections are stacked (q|k|v, w1|w3) and whose
Linears are int8 kernel-backed or plain float without bias. A decode step (one token a sequence,
KV cache set up) runs the fused kernels; any other call (prefill, no cache) runs the block's own
modules, so prefill fills the same cache the decode kernels read. `FoldedRMSNorm` +
`NormedOutput` move the final norm into the LM head's GEMV the same way.
"""

from __future__ import annotations

import torch
from torch import nn

from agnitra.kernels import ops

DECODE_MAX_ROWS = 8  # sequences a step: above this, the block's own modules run


def linear_weights(linear: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight [N, K], per-row scales or None) of an int8 kernel-backed or float Linear without bias."""
    from agnitra.kernels.modules import TritonInt8Linear

    if type(linear) is TritonInt8Linear and linear.bias is None:
        return linear.weight, linear.scales
    if type(linear) is nn.Linear and linear.bias is None and linear.weight.is_floating_point():
        return linear.weight, None
    return None


def fold_head_norm(model: nn.Module) -> int:
    """A Llama's final norm into its LM head's GEMV (`NormedOutput`); 1 when done, 0 when not a fit."""
    norm, output = getattr(model, "norm", None), getattr(model, "output", None)
    if norm is None or output is None or not hasattr(norm, "weight") or linear_weights(output) is None:
        return 0
    model.output = NormedOutput(norm, output)
    model.norm = FoldedRMSNorm(norm)
    return 1


def decode_block_blocker(block: nn.Module) -> str | None:
    """Why `TritonDecodeBlock` cannot take this Llama block (None when it can)."""
    from agnitra.models.llama import StackedFeedForward, StackedQKVAttention

    attention, ff = getattr(block, "attention", None), getattr(block, "feed_forward", None)
    if not isinstance(attention, StackedQKVAttention) or not isinstance(ff, StackedFeedForward):
        return "q|k|v and w1|w3 are not stacked (fuse=true, or fuse-projections first)"
    if any(linear_weights(m) is None for m in (attention.wqkv, attention.wo, ff.w13, ff.w2)):
        return "its projections are neither int8 kernel-backed nor plain float Linears without bias"
    if getattr(attention, "rope_order", None) is not None or getattr(attention, "kv_format", None) is not None:
        return "its key channels were reordered or its KV cache compressed (a layout kv step): the decode kernels read neither"
    if attention.head_dim & (attention.head_dim - 1):
        return f"head dimension {attention.head_dim} is not a power of two"
    return None


class TritonDecodeBlock(nn.Module):
    """A Llama block: decode steps in five fused kernels, everything else through its own modules."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.attention_norm, self.attention = block.attention_norm, block.attention
        self.ffn_norm, self.feed_forward = block.ffn_norm, block.feed_forward
        # prefill: the replaced block's own forward over these same modules (Block or TritonLlamaBlock)
        self._unfused_forward = type(block).forward

    def forward(self, x, cos, sin, mask, input_pos):
        cache = self.attention.kv_cache
        B, T, dim = x.shape
        if T != 1 or cache is None or B > DECODE_MAX_ROWS:
            return self._unfused_forward(self, x, cos, sin, mask, input_pos)
        att, ff = self.attention, self.feed_forward
        xf = x.reshape(B, dim).contiguous()
        wqkv, sqkv = linear_weights(att.wqkv)
        q = ops.decode_qkv_rope_cache(xf, wqkv, sqkv, self.attention_norm.weight, self.attention_norm.eps, cos, sin, input_pos, cache.k_cache, cache.v_cache, att.n_heads)
        o = ops.decode_attention(q, cache.k_cache, cache.v_cache, input_pos, att.n_heads)
        wo, so = linear_weights(att.wo)
        h = ops.decode_norm_gemv(o, wo, so, None, 0.0, xf)
        w13, s13 = linear_weights(ff.w13)
        a = ops.decode_gated_norm_gemv(h, w13, s13, self.ffn_norm.weight, self.ffn_norm.eps)
        w2, s2 = linear_weights(ff.w2)
        return ops.decode_norm_gemv(a, w2, s2, None, 0.0, h).view(B, 1, dim)


class FoldedRMSNorm(nn.Module):
    """The model's final RMSNorm, applied by the `NormedOutput` after it: here the identity.

    Keeps `weight` and `eps` (the model reads its activation dtype and device from `norm.weight`).
    """

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.weight, self.eps = norm.weight, norm.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def extra_repr(self) -> str:
        return "applied in the next projection (NormedOutput)"


class NormedOutput(nn.Module):
    """LM head over RMSNorm(x): one GEMV with the norm folded in for decode rows, else norm + Linear."""

    def __init__(self, norm: nn.Module, linear: nn.Module) -> None:
        super().__init__()
        self.norm, self.linear = norm, linear  # the model's own norm, for calls with many rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows > DECODE_MAX_ROWS:
            return self.linear(self.norm(x))
        w, s = linear_weights(self.linear)
        y = ops.decode_norm_gemv(x.reshape(rows, x.shape[-1]).contiguous(), w, s, self.norm.weight, self.norm.eps, None)
        return y.view(*x.shape[:-1], w.shape[0])

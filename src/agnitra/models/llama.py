"""A Llama-style decoder with a preallocated (static) KV cache.

The decode step has fixed shapes: tokens [B, 1] at position `input_pos` attend over a cache of
`max_seq_len` slots, masked beyond the current position, so the step can be compiled and
captured in a CUDA graph once and replayed for every token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_len: int = 4096  # positions the rotary table covers

    def __post_init__(self) -> None:
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(f"dim {self.dim}, heads {self.n_heads}, kv heads {self.n_kv_heads} do not divide")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, LlamaConfig] = {
    # ~15.7M parameters: CPU tests and the TinyLM runtime demo
    "tinylm": LlamaConfig(vocab_size=8192, dim=384, n_layers=6, n_heads=6, n_kv_heads=2, ffn_dim=1024),
    # TinyLlama-1.1B shape
    "llama-1b": LlamaConfig(vocab_size=32000, dim=2048, n_layers=22, n_heads=32, n_kv_heads=4, ffn_dim=5632),
    # Llama-3-8B shape
    "llama-8b": LlamaConfig(
        vocab_size=128256, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336, rope_theta=500000.0
    ),
    # every dimension small, for tests of the larger presets' code paths
    "tiny": LlamaConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class KVCache(nn.Module):
    """Keys and values of every position so far: [B, H_kv, S_max, D] each, written in place."""

    def __init__(self, batch: int, n_kv_heads: int, max_seq_len: int, head_dim: int, dtype, device) -> None:
        super().__init__()
        shape = (batch, n_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        # input_pos [T]; k, v [B, H_kv, T, D]
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, T, H, D]; cos, sin [T, D/2]: rotate the two halves of each head (the HF layout)
    # (or cos, sin [T, H, D/2]: each head its own order of the frequencies, `Attention.rope_order`)
    xf = x.float()
    half = xf.shape[-1] // 2
    x1, x2 = xf[..., :half], xf[..., half:]
    if cos.dim() == 2:
        cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.kv_cache: KVCache | None = None
        self.kv_format = None  # a compressed cache's format (models.kv_cache.KVFormat): setup_caches keeps it
        # [H_kv * D/2]: the rotary frequency of each key head's channel pair, where the pairs were
        # permuted (q's and k's rows together); None: the natural order
        self.register_buffer("rope_order", None)

    def project_qkv(self, x: torch.Tensor):
        """q [B, T, H, D], k and v [B, T, H_kv, D]."""
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)
        return q, k, v

    def rotary(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q [B, T, H, D] and k [B, T, H_kv, D] rotated, each pair by its own frequency."""
        if self.rope_order is None:
            return apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        order = self.rope_order.view(self.n_kv_heads, -1)
        cos_k, sin_k = cos[:, order], sin[:, order]  # [T, H_kv, D/2]
        groups = self.n_heads // self.n_kv_heads
        return apply_rope(q, cos_k.repeat_interleave(groups, 1), sin_k.repeat_interleave(groups, 1)), apply_rope(k, cos_k, sin_k)

    def forward(self, x, cos, sin, mask, input_pos):
        B, T, _ = x.shape
        q, k, v = self.project_qkv(x)
        q, k = self.rotary(q, k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)  # [B, H_kv, S_max, D]
        groups = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, T, D]
        return self.wo(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # gate
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # up
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class StackedQKVAttention(Attention):
    """Attention with q|k|v from one Linear over the stacked wq, wk, wv rows: one GEMM (a GEMV in
    decode steps) instead of three. Everything else is the original module's code and weights."""

    def __init__(self, attention: Attention, wqkv: nn.Module) -> None:
        nn.Module.__init__(self)
        self.n_heads, self.n_kv_heads, self.head_dim = attention.n_heads, attention.n_kv_heads, attention.head_dim
        self.wqkv, self.wo = wqkv, attention.wo
        self.kv_cache, self.kv_format = attention.kv_cache, getattr(attention, "kv_format", None)
        self.register_buffer("rope_order", getattr(attention, "rope_order", None))

    def project_qkv(self, x: torch.Tensor):
        B, T, _ = x.shape
        q_size, kv_size = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_size, kv_size, kv_size], dim=-1)
        return q.view(B, T, self.n_heads, self.head_dim), k.view(B, T, self.n_kv_heads, self.head_dim), v.view(B, T, self.n_kv_heads, self.head_dim)


class StackedFeedForward(nn.Module):
    """w2(silu(gate) * up) with gate|up from one Linear over the stacked w1, w3 rows."""

    def __init__(self, w13: nn.Module, w2: nn.Module) -> None:
        super().__init__()
        self.w13, self.w2 = w13, w2

    def gate(self, ab: torch.Tensor) -> torch.Tensor:
        a, b = ab.chunk(2, dim=-1)
        return F.silu(a) * b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.gate(self.w13(x)))


def linears_stack(linears: list[nn.Module]) -> bool:
    """Floating-point nn.Linear of one input size, dtype and bias use: `stack_linears` can stack them."""
    first = linears[0]
    return all(
        type(m) is nn.Linear and m.weight.is_floating_point() and m.in_features == first.in_features
        and m.weight.dtype == first.weight.dtype and (m.bias is None) == (first.bias is None)
        for m in linears
    )


def stack_linears(linears: list[nn.Linear]) -> nn.Linear:
    """One nn.Linear whose output is the outputs of `linears` (same input, `linears_stack`) side by side."""
    if not linears_stack(linears):
        raise ValueError("stack_linears: floating-point nn.Linear of one input size, dtype and bias use only")
    first = linears[0]
    out = sum(m.out_features for m in linears)
    stacked = nn.Linear(first.in_features, out, bias=first.bias is not None, device="meta")
    stacked.weight = nn.Parameter(torch.cat([m.weight.detach() for m in linears]), requires_grad=False)
    if first.bias is not None:
        stacked.bias = nn.Parameter(torch.cat([m.bias.detach() for m in linears]), requires_grad=False)
    return stacked


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin, mask, input_pos):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.register_buffer("rope_cos", torch.empty(cfg.rope_len, cfg.head_dim // 2), persistent=False)
        self.register_buffer("rope_sin", torch.empty(cfg.rope_len, cfg.head_dim // 2), persistent=False)
        self.register_buffer("causal_mask", None, persistent=False)
        self.max_batch = 0
        self.max_seq_len = 0
        if self.rope_cos.device.type != "meta":
            self.reset_rope()

    def reset_rope(self) -> None:
        cfg = self.config
        device = self.rope_cos.device
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
        angles = torch.outer(torch.arange(cfg.rope_len, device=device).float(), inv_freq)  # [S, D/2]
        self.rope_cos = angles.cos()
        self.rope_sin = angles.sin()

    def setup_caches(self, batch: int, max_seq_len: int) -> None:
        """Preallocate the KV cache of every layer for `batch` sequences of `max_seq_len` positions."""
        if max_seq_len > self.config.rope_len:
            raise ValueError(f"max_seq_len {max_seq_len} exceeds the rotary table ({self.config.rope_len})")
        weight = self.norm.weight  # activation dtype and device; the LM head may be quantised
        for layer in self.layers:
            fmt = getattr(layer.attention, "kv_format", None)  # a compressed cache stays compressed
            layer.attention.kv_cache = (fmt.make_cache if fmt is not None else KVCache)(
                batch, self.config.n_kv_heads, max_seq_len, self.config.head_dim, weight.dtype, weight.device
            )
        self.causal_mask = torch.tril(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool, device=weight.device))
        self.max_batch, self.max_seq_len = batch, max_seq_len

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None) -> torch.Tensor:
        # tokens [B, T], input_pos [T] -> logits [B, T, V]
        T = tokens.shape[1]
        if input_pos is None:
            input_pos = torch.arange(T, device=tokens.device)
        if self.causal_mask is None:  # no cache: plain causal attention over the given tokens
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=tokens.device))[None, None]
        else:
            mask = self.causal_mask[None, None, input_pos]  # [1, 1, T, S_max]
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, input_pos)
        return self.output(self.norm(x))


def init_weights(model: Llama, seed: int, std: float = 0.02) -> Llama:
    """Random weights every layer contributes to: N(0, std) matrices, unit norm gains."""
    device = model.output.weight.device
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, std, generator=gen)
    return model


def build_llama(cfg: LlamaConfig, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Llama:
    """Build directly on `device` in `dtype` (an 8B model never passes through fp32 or the CPU)."""
    with torch.device("meta"):
        model = Llama(cfg)
    model = model.to(dtype=dtype).to_empty(device=device)
    model.rope_cos = model.rope_cos.float()
    model.rope_sin = model.rope_sin.float()
    model.reset_rope()
    return init_weights(model, seed).eval()

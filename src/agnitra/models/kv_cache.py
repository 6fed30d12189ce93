"""A compressed KV cache for our Llama decoder: keys and values held as integer codes with
group-wise scales (int8, or int4 packed two codes a byte) and/or with some head-dimension
channels not stored at all (pruned), and read back dequantized for the attention, which runs at
the model's precision. What the format loses is what the attention sees; what it keeps is what
the cache's buffers hold (`stored_bytes`: codes, scales, offsets and the kept channels' indices).

`KVFormat` says how: `bits` 0 (the model's dtype), 8 or 4; `group` channels sharing one scale
along the stored head dimension (0: the whole stored head, one scale a token and head);
`k_keep`/`v_keep` [H_kv, kept] the channels each key/value head keeps (None: all of them). An
attention module that carries a format (`Attention.kv_format`) gets this cache from
`Llama.setup_caches`, so a fresh cache keeps the format."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agnitra.models.llama import KVCache

SCALE_DTYPE = torch.float16  # each group's scale and offset (4 bytes a group)


@dataclass
class KVFormat:
    bits: int = 0  # 0: stored at the model's dtype; 8 or 4: integer codes
    group: int = 0  # stored channels sharing one scale and offset (0: all of a head's)
    k_keep: torch.Tensor | None = None  # [H_kv, kept] channel indices, ascending
    v_keep: torch.Tensor | None = None

    def make_cache(self, batch: int, n_kv_heads: int, max_seq_len: int, head_dim: int, dtype, device) -> CompressedKVCache:
        return CompressedKVCache(self, batch, n_kv_heads, max_seq_len, head_dim, dtype, device)

    def describe(self) -> str:
        said = [f"int{self.bits} codes, fp16 scale and offset per {'head' if not self.group else f'{self.group} channels'} and token" if self.bits else "the model's dtype"]
        for name, keep in (("keys", self.k_keep), ("values", self.v_keep)):
            if keep is not None:
                said.append(f"{name}: {keep.shape[1]} channels a head kept")
        return "; ".join(said)


def quantize(x: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [..., C] -> (codes uint8 [..., C] in 0..2^bits-1, scale and offset [..., C / group] in
    fp16): one asymmetric scale per group of `group` consecutive channels (0: all C). The codes
    are rounded against the fp16 scale and offset that are stored, so reading back is exact to them."""
    size = group or x.shape[-1]
    groups = x.float().reshape(*x.shape[:-1], x.shape[-1] // size, size)
    low, high = groups.amin(-1), groups.amax(-1)
    levels = 2**bits - 1
    scale = ((high - low) / levels).to(SCALE_DTYPE)
    offset = low.to(SCALE_DTYPE)
    step = scale.float().clamp_min(1e-12)
    codes = torch.round((groups - offset.float()[..., None]) / step[..., None]).clamp_(0, levels).to(torch.uint8)
    return codes.reshape(x.shape), scale, offset


def dequantize(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, dtype) -> torch.Tensor:
    groups = codes.reshape(*codes.shape[:-1], scale.shape[-1], -1).float()
    return (groups * scale.float()[..., None] + offset.float()[..., None]).reshape(codes.shape).to(dtype)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Codes 0..15 [..., C] (C even) -> bytes [..., C / 2]: channel 2i in the low nibble, 2i+1 in the high."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    return torch.stack((packed & 15, packed >> 4), dim=-1).flatten(-2)


def roundtrip(x: torch.Tensor, bits: int, group: int) -> torch.Tensor:
    """x as the cache gives it back (quantised and read back; as it is for bits 0)."""
    if not bits:
        return x
    codes, scale, offset = quantize(x, bits, group)
    if bits == 4:
        codes = unpack_int4(pack_int4(codes))
    return dequantize(codes, scale, offset, x.dtype)


def reconstruct(x: torch.Tensor, keep: torch.Tensor | None, bits: int, group: int) -> torch.Tensor:
    """x [B, H, T, D] as a cache of this format gives it back (pruned channels zero)."""
    if keep is not None:
        index = keep.to(x.device)[None, :, None, :].expand(x.shape[0], -1, x.shape[2], -1)
        return x.new_zeros(x.shape).scatter(3, index, roundtrip(torch.gather(x, 3, index), bits, group))
    return roundtrip(x, bits, group)


def geometry(cache: KVCache) -> tuple[tuple[int, int, int, int], torch.dtype, torch.device]:
    """([B, H_kv, S_max, D], dtype, device) of a plain or compressed cache."""
    if isinstance(cache, CompressedKVCache):
        return cache.shape, cache.k.dtype, next(cache.k.buffers()).device
    return tuple(cache.k_cache.shape), cache.k_cache.dtype, cache.k_cache.device


class _Store(nn.Module):
    """One of the cache's two tensors ([B, H_kv, S, D] as the attention reads it), held compressed."""

    def __init__(self, fmt: KVFormat, keep: torch.Tensor | None, shape: tuple[int, int, int, int], dtype, device) -> None:
        super().__init__()
        batch, heads, slots, head_dim = shape
        self.bits, self.group, self.head_dim, self.dtype = fmt.bits, fmt.group, head_dim, dtype
        kept = keep.shape[1] if keep is not None else head_dim
        if fmt.bits and kept % (fmt.group or kept):
            raise ValueError(f"groups of {fmt.group} do not divide the {kept} stored channels of a head")
        if fmt.bits == 4 and kept % 2:
            raise ValueError(f"int4 codes are packed two a byte: {kept} stored channels a head is odd")
        self.register_buffer("keep", keep.to(device=device, dtype=torch.long) if keep is not None else None, persistent=False)
        stored = (batch, heads, slots, kept)
        if not fmt.bits:
            self.register_buffer("data", torch.zeros(stored, dtype=dtype, device=device), persistent=False)
            return
        n_groups = kept // (fmt.group or kept)
        width = kept // 2 if fmt.bits == 4 else kept
        self.register_buffer("codes", torch.zeros((batch, heads, slots, width), dtype=torch.uint8, device=device), persistent=False)
        self.register_buffer("scale", torch.zeros((batch, heads, slots, n_groups), dtype=SCALE_DTYPE, device=device), persistent=False)
        self.register_buffer("offset", torch.zeros((batch, heads, slots, n_groups), dtype=SCALE_DTYPE, device=device), persistent=False)

    def write(self, input_pos: torch.Tensor, x: torch.Tensor) -> None:
        if self.keep is not None:  # [B, H, T, D] -> the kept channels of each head
            x = torch.gather(x, 3, self.keep[None, :, None, :].expand(x.shape[0], -1, x.shape[2], -1))
        if not self.bits:
            self.data[:, :, input_pos] = x.to(self.dtype)
            return
        codes, scale, offset = quantize(x, self.bits, self.group)
        self.codes[:, :, input_pos] = pack_int4(codes) if self.bits == 4 else codes
        self.scale[:, :, input_pos] = scale
        self.offset[:, :, input_pos] = offset

    def read(self) -> torch.Tensor:
        if not self.bits:
            kept = self.data
        else:
            codes = unpack_int4(self.codes) if self.bits == 4 else self.codes
            kept = dequantize(codes, self.scale, self.offset, self.dtype)
        if self.keep is None:
            return kept
        full = kept.new_zeros((*kept.shape[:3], self.head_dim))
        return full.scatter(3, self.keep[None, :, None, :].expand(kept.shape[0], -1, kept.shape[2], -1), kept)


class CompressedKVCache(KVCache):
    """`KVCache`'s interface (`update` writes positions, returns every slot's keys and values
    [B, H_kv, S_max, D]) over compressed storage; the slots are read back dequantized on each call."""

    def __init__(self, fmt: KVFormat, batch: int, n_kv_heads: int, max_seq_len: int, head_dim: int, dtype, device) -> None:
        nn.Module.__init__(self)
        self.format = fmt
        self.shape = shape = (batch, n_kv_heads, max_seq_len, head_dim)
        self.k = _Store(fmt, fmt.k_keep, shape, dtype, device)
        self.v = _Store(fmt, fmt.v_keep, shape, dtype, device)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        self.k.write(input_pos, k)
        self.v.write(input_pos, v)
        return self.k.read(), self.v.read()


def cache_bytes(model: nn.Module) -> int | None:
    """Bytes the KV caches of `model` hold (every buffer of every `KVCache`, compressed ones'
    codes, scales, offsets and kept indices); None where the model has none."""
    caches = [m for m in model.modules() if isinstance(m, KVCache)]
    if not caches:
        return None
    return sum(b.numel() * b.element_size() for cache in caches for b in cache.buffers())

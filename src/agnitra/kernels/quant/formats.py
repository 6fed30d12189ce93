"""The weight-only quantised formats, for the kernels and `transforms.quantize` alike (torch only).

* int8: symmetric per output row. q [N, K] int8, scales [N]: W'[n, k] = q[n, k] * scales[n].
* int4: asymmetric per group of G consecutive input features, tinygemm's form: codes q in 0..15,
  W'[n, k] = (q[n, k] - 8) * scales[n, g] + zeros[n, g], g = k // G.

int4 codes are packed two a byte, [N, K/2] uint8, in one of two orders:

* low first (`pack_int4`): byte j = q[2j] | q[2j + 1] << 4, so a little-endian 32-bit word holds
  codes 8j..8j + 7 at bits 4i. The kernels' layout, with scales and zeros as [N, K/G] each.
* high first (`pack_int4_high_first`): byte j = q[2j] << 4 | q[2j + 1], torch's layout (the input
  of `aten._convert_weight_to_int4pack`) and the int4 transform's "reference" layout, with scales
  and zeros as one [K/G, N, 2] tensor (`from_transform_int4` converts it to the kernels').
"""

from __future__ import annotations

import torch


def quantize_int8_rowwise(weight: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: W [N, K] ~= q [N, K] int8 * scales [N] (scales in `dtype`)."""
    dtype = dtype or weight.dtype
    w = weight.detach().float()  # [N, K]
    scales = (w.abs().amax(dim=1) / 127).clamp(min=torch.finfo(dtype).tiny).to(dtype)  # [N]
    q = torch.round(w / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)  # [N, K]
    return q.contiguous(), scales


def quantize_int4_codes(weight: torch.Tensor, group_size: int, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W [N, K] -> (codes [N, K] uint8 in 0..15, scales [N, K/G], zeros [N, K/G] in `dtype`, default W's).

    Dequantised: W'[n, k] = (codes[n, k] - 8) * scales[n, g] + zeros[n, g] with g = k // group_size.
    """
    dtype = dtype or weight.dtype
    n, k = weight.shape
    if k % group_size:
        raise ValueError(f"in_features {k} is not a multiple of group_size {group_size}")
    w = weight.detach().float().reshape(n, k // group_size, group_size)  # [N, G, gs]
    wmin, wmax = w.amin(dim=-1), w.amax(dim=-1)  # [N, G]
    floor = max(1e-8, torch.finfo(dtype).tiny)
    scales = ((wmax - wmin) / 15).clamp(min=floor)
    zeros = wmin + 8 * scales
    scales, zeros = scales.to(dtype), zeros.to(dtype)  # what the kernels will read
    codes = torch.round((w - zeros.float()[..., None]) / scales.float()[..., None] + 8).clamp(0, 15)
    return codes.reshape(n, k).to(torch.uint8), scales, zeros


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Codes [N, K] in 0..15 -> uint8 [N, K/2] low first: byte j = q[:, 2j] (low nibble) | q[:, 2j+1] << 4."""
    if q.dim() != 2 or q.shape[1] % 2:
        raise ValueError(f"pack_int4 needs codes [N, K] with K even, got {tuple(q.shape)}")
    q = q.to(torch.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] -> codes [N, K] uint8 (0..15), the inverse of `pack_int4`."""
    low, high = packed & 0xF, packed >> 4
    return torch.stack((low, high), dim=-1).reshape(packed.shape[0], -1)


def pack_int4_high_first(codes: torch.Tensor) -> torch.Tensor:
    """Codes [N, K] in 0..15 -> uint8 [N, K/2], feature 2j in the high nibble, 2j+1 in the low."""
    codes = codes.to(torch.uint8)
    return ((codes[:, 0::2] << 4) | codes[:, 1::2]).contiguous()


def unpack_int4_high_first(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] -> codes [N, K] (uint8, 0..15), the inverse of `pack_int4_high_first`."""
    high, low = packed >> 4, packed & 0xF
    return torch.stack((high, low), dim=-1).reshape(packed.shape[0], -1)


def from_transform_int4(packed_high_first: torch.Tensor, scales_and_zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The int4 transform's "reference" layout -> the kernels'.

    (packed [N, K/2] even k in the HIGH nibble, scales_and_zeros [K/G, N, 2]) ->
    (packed [N, K/2] even k in the LOW nibble, scales [N, K/G], zeros [N, K/G]).
    """
    swapped = ((packed_high_first >> 4) | (packed_high_first << 4)).contiguous()  # uint8: bits past 8 drop
    return swapped, scales_and_zeros[..., 0].t().contiguous(), scales_and_zeros[..., 1].t().contiguous()


def int4_dequantize(w_packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight [N, K] that low-first packed codes, scales and zeros [N, K/G] stand for, computed in `dtype`."""
    q = unpack_int4(w_packed).to(dtype)  # [N, K]
    s = scales.to(dtype).repeat_interleave(group_size, dim=1)  # [N, K]
    z = zeros.to(dtype).repeat_interleave(group_size, dim=1)
    return (q - 8) * s + z

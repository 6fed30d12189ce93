"""int4 GEMVs over the packed bytes, for any batch up to 16 (config KERNEL "bytes", "mma").

The int4 format is `formats`' (W'[n, k] = (q - 8) * s[n, g] + z[n, g], codes packed low first,
`w_packed` [N, K/2] uint8). Within a group the scale factors out: sum_k x_k W'_k = s * sum_k x_k
(q_k - 8) + z * sum_k x_k, so each chunk of BLOCK_K features (BLOCK_K divides G) is summed over
the codes and scaled once.

* "bytes" (`_int4_gemv_kernel`, the default above batch 1): program (pid_n, pid_k, pid_m) owns
  BLOCK_N outputs and BLOCK_M rows of x; each chunk's bytes split into even-k and odd-k nibbles,
  multiplied by the even and odd elements of x (codes to floats by the mantissa trick, exact).
* "mma" (`_int4_gemv_mma_kernel`, 16-bit activations, M <= 16): codes become packed 16-bit floats
  by inline PTX (prmt / lop3 / fma.rn.x2: `INT4_ASM_BF16`, `INT4_ASM_FP16`; arithmetic under the
  interpreter) and tl.dot sums W_chunk @ x^T with M padded to 16. Offered for M > 1 only: on the
  H100 it did not beat the byte kernel at batch 1.

Split-K is fixed up in the kernel (`split_k`). Parts: the kernels, the host launcher
`_int4_bytes_gemv` (called by `int4.int4_weight_only_matmul`), the configuration space, which
`int4`'s KernelSpec "int4_gemv" joins to the other GEMVs'; the reference is `int4.int4_reference`.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from agnitra.kernels._triton import jit_kernel, tl
from agnitra.kernels.quant.common import _MAX_ACC_PER_THREAD, _block_m, _cdiv, _launch_options, _ptx, _split_ks
from agnitra.kernels.quant.split_k import _gemv_bias, _split_k_buffers, _store_gemv_rows  # noqa: F401 - device helpers the kernels call


# ============================================================================================
# Part 1: Triton kernels
# ============================================================================================


def _int4_gemv_kernel(
    x_ptr,  # [M, K] activations (fp16 / bf16 / fp32)
    w_ptr,  # [N, K/2] uint8, two codes per byte, low nibble = even k
    s_ptr,  # [N, K/G] group scales
    z_ptr,  # [N, K/G] group zeros
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [M, N] output (x's dtype)
    p_ptr,  # [SPLIT_K, M, N] fp32 partials (SPLIT_K > 1)
    c_ptr,  # int32 arrival counters, one per output block, zero between launches (SPLIT_K > 1)
    M, N, K,  # problem size (K in features, not bytes)
    stride_xm, stride_xk,  # x strides (elements)
    stride_wn, stride_wk,  # w strides (bytes)
    stride_sn, stride_sg,  # scales strides
    stride_zn, stride_zg,  # zeros strides
    stride_ym, stride_yn,  # y strides: row, column
    GROUP_SIZE: tl.constexpr,  # G, a multiple of BLOCK_K (one group per chunk)
    HAS_BIAS: tl.constexpr,  # add the bias
    BLOCK_M: tl.constexpr,  # rows of x per program (power of two >= M, at most 8)
    BLOCK_N: tl.constexpr,  # output channels per program
    BLOCK_K: tl.constexpr,  # input features per loop step (BLOCK_K / 2 bytes per row)
    SPLIT_K: tl.constexpr,  # programs sharing one output block along K
):
    pid_n = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    pid_m = tl.program_id(axis=2)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_j = tl.arange(0, BLOCK_K // 2)  # byte j of the chunk holds features 2j (low) and 2j+1 (high)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (pid_k * BLOCK_K + 2 * offs_j[None, :]) * stride_xk  # [BM, BK/2] even k
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + (pid_k * (BLOCK_K // 2) + offs_j[None, :]) * stride_wk  # [BN, BK/2]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    bias = _gemv_bias(b_ptr, offs_n, HAS_BIAS)
    for k0 in range(pid_k * BLOCK_K, K, SPLIT_K * BLOCK_K):  # K % BLOCK_K == 0: no masks
        packed = tl.load(w_ptrs).to(tl.int32)  # [BN, BK/2] bytes, zero-extended
        x_even = tl.load(x_ptrs).to(tl.float32)  # [BM, BK/2]
        x_odd = tl.load(x_ptrs + stride_xk).to(tl.float32)
        # codes - 8 in -8..7 without a conversion instruction: the bits of 2^23 + q, minus 2^23 + 8
        q_even = ((packed & 0xF) | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0  # [BN, BK/2]
        q_odd = ((packed >> 4) | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0
        if BLOCK_M == 1:
            part = tl.sum(q_even * x_even + q_odd * x_odd, axis=1)[None, :]  # [BN, BK/2] * [1, BK/2] -> [1, BN]
        else:
            part = tl.sum(x_even[:, None, :] * q_even[None, :, :] + x_odd[:, None, :] * q_odd[None, :, :], axis=2)  # [BM, BN]
        # the chunk lies in one group: its scale and zero factor out of the chunk's sum
        g = k0 // GROUP_SIZE
        scale = tl.load(s_ptr + offs_n * stride_sn + g * stride_sg).to(tl.float32)  # [BN]
        zero = tl.load(z_ptr + offs_n * stride_zn + g * stride_zg).to(tl.float32)  # [BN]
        x_sum = tl.sum(x_even + x_odd, axis=1)  # [BM]
        acc += part * scale[None, :] + x_sum[:, None] * zero[None, :]
        x_ptrs += SPLIT_K * BLOCK_K * stride_xk
        w_ptrs += SPLIT_K * (BLOCK_K // 2) * stride_wk
    _store_gemv_rows(acc, y_ptr, p_ptr, c_ptr, bias, pid_m, pid_n, pid_k, M, N, stride_ym, stride_yn, HAS_BIAS, BLOCK_M, BLOCK_N, SPLIT_K)


# int4 codes -> the 16-bit float (q - 8), two per 32-bit register, for `tl.inline_asm_elementwise`
# with pack=4: $4 holds four packed bytes b0..b3; $0, $1 receive the low nibbles (b0, b1), (b2, b3),
# $2, $3 the high nibbles. prmt spreads the bytes into the 16-bit halves; lop3 ((a & mask) | magic)
# writes a code into the mantissa of MAGIC (bf16 128 = 0x4300: ulp 1 up to 256; fp16 1024 = 0x6400:
# ulp 1 up to 2048), so the half holds MAGIC + q exactly; one packed fma subtracts MAGIC + 8.
# Six integer and two float instructions per eight codes (the arithmetic path takes about five per code).
_INT4_TO_16BIT_ASM = """
{
.reg .b32 lo01, lo23, hi01, hi23, one, bias;
prmt.b32 lo01, $4, 0, 0x4140;
prmt.b32 lo23, $4, 0, 0x4342;
shr.u32 hi01, lo01, 4;
shr.u32 hi23, lo23, 4;
lop3.b32 $0, lo01, 0x000F000F, MAGIC, 0xEA;
lop3.b32 $1, lo23, 0x000F000F, MAGIC, 0xEA;
lop3.b32 $2, hi01, 0x000F000F, MAGIC, 0xEA;
lop3.b32 $3, hi23, 0x000F000F, MAGIC, 0xEA;
mov.b32 one, ONE;
mov.b32 bias, BIAS;
fma.rn.TYPE $0, $0, one, bias;
fma.rn.TYPE $1, $1, one, bias;
fma.rn.TYPE $2, $2, one, bias;
fma.rn.TYPE $3, $3, one, bias;
}
"""
INT4_ASM_BF16 = (
    _INT4_TO_16BIT_ASM.replace("MAGIC", "0x43004300").replace("ONE", "0x3F803F80").replace("BIAS", "0xC308C308").replace("TYPE", "bf16x2")
)  # 128 + q - 136
INT4_ASM_FP16 = (
    _INT4_TO_16BIT_ASM.replace("MAGIC", "0x64006400").replace("ONE", "0x3C003C00").replace("BIAS", "0xE408E408").replace("TYPE", "f16x2")
)  # 1024 + q - 1032


def _int4_gemv_mma_kernel(
    x_ptr,  # [M, K] activations (fp16 / bf16), M <= 16
    w_ptr,  # [N, K/2] uint8, two codes per byte, low nibble = even k
    s_ptr,  # [N, K/G] group scales
    z_ptr,  # [N, K/G] group zeros
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [M, N] output (x's dtype)
    p_ptr,  # [SPLIT_K, M, N] fp32 partials (SPLIT_K > 1)
    c_ptr,  # int32 arrival counters, one per output block, zero between launches (SPLIT_K > 1)
    M, N, K,  # problem size (K in features, not bytes)
    stride_xm, stride_xk,  # x strides (elements)
    stride_wn, stride_wk,  # w strides (bytes)
    stride_sn, stride_sg,  # scales strides
    stride_zn, stride_zg,  # zeros strides
    stride_ym, stride_yn,  # y strides: row, column
    GROUP_SIZE: tl.constexpr,  # G, a multiple of BLOCK_K (one group per chunk)
    HAS_BIAS: tl.constexpr,  # add the bias
    ASM_DEQUANT: tl.constexpr,  # "" (arithmetic: the interpreter) or INT4_ASM_BF16 / INT4_ASM_FP16
    BLOCK_N: tl.constexpr,  # output channels per program (the MMA's M)
    BLOCK_K: tl.constexpr,  # input features per loop step (BLOCK_K / 2 bytes per row)
    SPLIT_K: tl.constexpr,  # programs sharing one output block along K
):
    """The GEMV on tensor cores: y^T [BN, 16] += W_chunk [BN, BK] @ x_chunk^T [BK, 16] per group chunk.

    M (at most 16) is padded to the MMA's 16 columns with zero rows of x; the wasted MMA work is
    free beside the weight bytes. The codes become the 16-bit floats q - 8 (exact), so the MMA
    sums x (q - 8) in fp32 and the group's scale and zero apply once per chunk per output.
    """
    pid_n = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    offs_m = tl.arange(0, 16)
    m_ok = offs_m < M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_j = tl.arange(0, BLOCK_K // 2)  # byte j of the chunk: features 2j (low nibble), 2j+1 (high)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (pid_k * BLOCK_K + 2 * offs_j[None, :]) * stride_xk  # [16, BK/2] even k
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + (pid_k * (BLOCK_K // 2) + offs_j[None, :]) * stride_wk  # [BN, BK/2]
    acc = tl.zeros((BLOCK_N, 16), dtype=tl.float32)  # y^T
    bias = _gemv_bias(b_ptr, offs_n, HAS_BIAS)
    for k0 in range(pid_k * BLOCK_K, K, SPLIT_K * BLOCK_K):  # K % BLOCK_K == 0: no masks along K
        packed = tl.load(w_ptrs)  # [BN, BK/2] uint8
        x_even = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)  # [16, BK/2]
        x_odd = tl.load(x_ptrs + stride_xk, mask=m_ok[:, None], other=0.0)
        if ASM_DEQUANT == "":
            q_even = ((packed & 0xF).to(tl.int32) - 8).to(tl.float32).to(x_even.dtype)  # [BN, BK/2]
            q_odd = ((packed >> 4).to(tl.int32) - 8).to(tl.float32).to(x_even.dtype)
        else:
            q_even, q_odd = tl.inline_asm_elementwise(
                ASM_DEQUANT, "=r,=r,=r,=r,r", [packed], dtype=(x_even.dtype, x_even.dtype), is_pure=True, pack=4
            )
        part = tl.dot(q_even, tl.trans(x_even))  # [BN, 16]: sum over the chunk of (q - 8) x
        part = tl.dot(q_odd, tl.trans(x_odd), part)
        g = k0 // GROUP_SIZE
        scale = tl.load(s_ptr + offs_n * stride_sn + g * stride_sg).to(tl.float32)  # [BN]
        zero = tl.load(z_ptr + offs_n * stride_zn + g * stride_zg).to(tl.float32)
        x_sum = tl.sum(x_even.to(tl.float32) + x_odd.to(tl.float32), axis=1)  # [16]
        acc += part * scale[:, None] + zero[:, None] * x_sum[None, :]
        x_ptrs += SPLIT_K * BLOCK_K * stride_xk
        w_ptrs += SPLIT_K * (BLOCK_K // 2) * stride_wk
    # y^T [BN, 16] -> y [16, BN]: one block of 16 rows, ended like every other GEMV block
    _store_gemv_rows(tl.trans(acc), y_ptr, p_ptr, c_ptr, bias, 0, pid_n, pid_k, M, N, stride_ym, stride_yn, HAS_BIAS, 16, BLOCK_N, SPLIT_K)


# ============================================================================================
# Part 2: host launcher
# ============================================================================================


def _int4_bytes_gemv(kernel: str, x, w_packed, scales, zeros, group_size, bias, y, cfg) -> None:
    """The int4 GEMVs over the packed bytes: KERNEL 'bytes' (`_int4_gemv_kernel`) or 'mma' (`_int4_gemv_mma_kernel`)."""
    m, k = x.shape
    n = w_packed.shape[0]
    split_k, n_blocks = cfg["SPLIT_K"], _cdiv(n, cfg["BLOCK_N"])
    if kernel == "mma":
        _check_int4_mma(cfg, x, m)
        fn, grid, extra = _int4_gemv_mma_kernel, (n_blocks, split_k), {"ASM_DEQUANT": _ptx(INT4_ASM_BF16 if x.dtype == torch.bfloat16 else INT4_ASM_FP16)}
    else:
        block_m = _block_m(m)
        fn, grid, extra = _int4_gemv_kernel, (n_blocks, split_k, _cdiv(m, block_m)), {"BLOCK_M": block_m}
    partials, counters = _split_k_buffers(split_k, m, n, n_blocks * _cdiv(m, _block_m(m)), y)
    jit_kernel(fn)[grid](
        x, w_packed, scales, zeros, bias if bias is not None else scales, y, partials, counters,
        m, n, k,
        x.stride(0), x.stride(1), w_packed.stride(0), w_packed.stride(1),
        scales.stride(0), scales.stride(1), zeros.stride(0), zeros.stride(1), y.stride(0), y.stride(1),
        GROUP_SIZE=group_size, HAS_BIAS=bias is not None,
        BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], SPLIT_K=split_k, **extra,
        **_launch_options(cfg),
    )


def _check_int4_mma(cfg: dict[str, Any], x: torch.Tensor, m: int) -> None:
    """The tensor-core GEMV: 16-bit activations, M <= 16 (the MMA's padded columns), MMA-sized blocks."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"int4 GEMV with MMA=True needs fp16 or bf16 activations, got {x.dtype}; use MMA=False")
    if m > 16:
        raise ValueError(f"int4 GEMV with MMA=True handles M <= 16 rows, got M={m}; use the tiled path")
    if cfg["BLOCK_N"] < 16 or cfg["BLOCK_K"] < 32:
        raise ValueError(f"int4 GEMV with MMA=True needs BLOCK_N >= 16 and BLOCK_K >= 32 (tl.dot tiles), got {cfg}")


# ============================================================================================
# Part 3: configuration space
# ============================================================================================


def _int4_bytes_space(m: int, n: int, k: int, group: int) -> list[dict[str, Any]]:
    """The byte kernel and, up to 16 rows, the MMA kernel over bytes (`int4.int4_gemv_configs` drops
    it for fp32 activations)."""
    out = []
    bm = _block_m(m)
    pairs = [(bn, bk) for bn, bk in ((16, 128), (32, 128), (64, 128), (32, 64), (64, 64), (128, 32)) if group % bk == 0] or [(64, group), (128, group)]
    for (bn, bk), nw in itertools.product(pairs, (4, 8)):
        if not 8 <= bm * bn * bk // 2 // (32 * nw) <= _MAX_ACC_PER_THREAD:
            continue
        for split in _split_ks(_cdiv(n, bn), _cdiv(k, bk)):
            out.append({"KERNEL": "bytes", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": nw, "num_stages": 3})
    if m <= 16:
        for bn, bk in ((64, 128), (128, 128), (64, 64)):
            if group % bk == 0:
                for split in _split_ks(_cdiv(n, bn), k // bk):
                    out.append({"KERNEL": "mma", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4 if bn == 64 else 8, "num_stages": 3})
    return out

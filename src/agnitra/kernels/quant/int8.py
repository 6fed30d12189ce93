"""int8 weight-only matmul: y [M, N] = (x [M, K] @ q[N, K]^T) * scales[N] (+ bias[N]).

Format (`formats.quantize_int8_rowwise`): symmetric per output row, `w_int8` [N, K] int8 (row n =
output channel n, K contiguous), `scales` [N] in any float dtype. The scale factors out of the K
sum: y[m, n] = scales[n] * sum_k x[m, k] q[n, k].

The GEMV (decode, M <= 8; `_int8_gemv_kernel`): program (pid_n, pid_k, pid_m) owns BLOCK_N output
rows and BLOCK_M (the power of two >= M, at most 8) rows of x and walks K in BLOCK_K chunks
(pid_k, pid_k + SPLIT_K, ...). Each chunk is a [BLOCK_N, BLOCK_K] int8 tile (16-byte loads),
converted to fp32 in registers without a conversion instruction (`_int8_to_f32`) and reduced
against x with `tl.sum` (M is far below an MMA tile); at M = 1 the products stay in a
[BLOCK_N, BLOCK_K] accumulator summed once after the loop. SPLIT_K > 1 is fixed up in the kernel
(`split_k`). STAGES > 1 streams the loop's loads through shared memory (cp.async): Triton
pipelines a loop without tl.dot only when the loop itself asks (`tl.range(num_stages=...)`).
The shape and strides are compiled in. Above M = 8 the tiled kernel runs (`tiled`).

Four parts: the kernel and its int8 -> fp32 helper, the host wrapper `int8_weight_only_matmul`
(both paths), the quantiser and PyTorch reference, the GEMV's configuration space and the
KernelSpecs "int8_gemv" and "int8_tiled".
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch

from agnitra.kernels._triton import device_helper, jit_kernel, tl
from agnitra.kernels.pdl import _pdl_trigger, _pdl_wait, pdl_options, pdl_trigger_refinements  # noqa: F401 - _pdl_*: device helpers the kernel calls
from agnitra.kernels.quant.common import (
    _MAX_ACC_PER_THREAD, _block_m, _bucket, _cdiv, _check_activations, _check_vector, _decode_inputs, _elt, _flops, _launch_options,
    _output_and_path, _positive_pow2, _ptx, _ref_dtype, _split_ks, _stages, _with_path,
)
from agnitra.kernels.quant.formats import quantize_int8_rowwise
from agnitra.kernels.quant.split_k import _gemv_bias, _split_k_buffers, _store_gemv_rows  # noqa: F401 - device helpers the kernel calls
from agnitra.kernels.quant.tiled import _int8_tiled, int8_tiled_configs, int8_tiled_default_config
from agnitra.kernels.spec import KernelSpec, pow2_bucket, register_kernel


# ============================================================================================
# Part 1: Triton kernel
# ============================================================================================


# int8 -> fp32, four codes a 32-bit register (inline PTX for `tl.inline_asm_elementwise`, pack=4): the
# sign bits flipped (w + 128, unsigned), each byte moved under the exponent of 2^23 by one prmt
# (the float 2^23 + w + 128, exact), one subtract: nine instructions per four codes, against
# three per code for sign extension, integer add and float subtract.
INT8_TO_F32_ASM = """
{
.reg .b32 t;
xor.b32 t, $4, 0x80808080;
prmt.b32 $0, t, 0x4B000000, 0x7540;
prmt.b32 $1, t, 0x4B000000, 0x7541;
prmt.b32 $2, t, 0x4B000000, 0x7542;
prmt.b32 $3, t, 0x4B000000, 0x7543;
sub.f32 $0, $0, 0f4B000080;
sub.f32 $1, $1, 0f4B000080;
sub.f32 $2, $2, 0f4B000080;
sub.f32 $3, $3, 0f4B000080;
}
"""


@device_helper
def _int8_to_f32(w, CVT_ASM: tl.constexpr):
    """int8 tile -> fp32 without a conversion instruction (exact): by `INT8_TO_F32_ASM` (prmt, four
    codes a register), or, with CVT_ASM "" (the interpreter), the bits of 2^23 + 128 + w minus 2^23 + 128."""
    if CVT_ASM == "":
        return (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0
    return tl.inline_asm_elementwise(CVT_ASM, "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4)


def _int8_gemv_kernel(
    x_ptr,  # [M, K] activations (fp16 / bf16 / fp32)
    w_ptr,  # [N, K] int8 weight, one row per output channel
    s_ptr,  # [N] per-row scales (any float dtype)
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [M, N] output (x's dtype)
    p_ptr,  # [SPLIT_K, M, N] fp32 partials (SPLIT_K > 1)
    c_ptr,  # [cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)] int32 arrival counters, zero between launches (SPLIT_K > 1)
    M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,  # problem size, compiled in: a kernel per layer shape, as Inductor compiles its own
    stride_xm: tl.constexpr, stride_xk: tl.constexpr,  # x strides (elements)
    stride_wn: tl.constexpr, stride_wk: tl.constexpr,  # w strides
    stride_ym: tl.constexpr, stride_yn: tl.constexpr,  # y strides: row, column
    HAS_BIAS: tl.constexpr,  # add the bias
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask along K
    BLOCK_M: tl.constexpr,  # rows of x per program (power of two >= M, at most 8)
    BLOCK_N: tl.constexpr,  # output channels per program
    BLOCK_K: tl.constexpr,  # input features per loop step
    SPLIT_K: tl.constexpr,  # programs sharing one output block along K
    STAGES: tl.constexpr = 1,  # > 1: Triton streams the loop's loads through shared memory (cp.async), STAGES - 1 steps ahead
    CVT_ASM: tl.constexpr = "",  # INT8_TO_F32_ASM, or "" (the integer-add trick: the interpreter)
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch, the next kernel let in at point PDL (`_pdl_trigger`)
):
    """The int8 GEMV. The shape and strides are compile-time constants (the loop bounds known, single
    steps peeled) and rows past the end read the last row: faster than the same loop with them at
    run time and rows wrapped by a modulo, at every llama shape on the H100 (docs/kernels.md)."""
    ONE_STEP: tl.constexpr = BLOCK_M == 1 and SPLIT_K * BLOCK_K >= K  # batch 1, one step a program
    pid_n = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    pid_m = tl.program_id(axis=2)
    # rows/channels past the end read the last one (no load masks); stores are masked
    offs_m = tl.minimum(pid_m * BLOCK_M + tl.arange(0, BLOCK_M), M - 1)
    offs_n = tl.minimum(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), N - 1)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (pid_k * BLOCK_K + offs_k[None, :]) * stride_xk  # [BM, BK]
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + (pid_k * BLOCK_K + offs_k[None, :]) * stride_wk  # [BN, BK]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_nk = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)  # M == 1: products summed over K once, after the loop
    # the per-row scale factors out of the K sum (one multiply per output); it and the bias are read now (`_gemv_bias`)
    scale = tl.load(s_ptr + offs_n).to(tl.float32)  # [BN]
    bias = _gemv_bias(b_ptr, offs_n, HAS_BIAS)
    _pdl_wait(PDL)  # x next
    for k0 in tl.range(pid_k * BLOCK_K, K, SPLIT_K * BLOCK_K, num_stages=STAGES):
        if EVEN_K:
            x = tl.load(x_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_mask = offs_k < K - k0
            x = tl.load(x_ptrs, mask=k_mask[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_mask[None, :], other=0)
        w = _int8_to_f32(w, CVT_ASM)  # [BN, BK]
        if ONE_STEP:  # summed at once, no [BN, BK] accumulator held
            acc += tl.sum(w * x.to(tl.float32), axis=1)[None, :]
        elif BLOCK_M == 1:
            acc_nk += w * x.to(tl.float32)  # [BN, BK] * [1, BK]
        else:
            # [BM, 1, BK] * [1, BN, BK] summed over K -> [BM, BN]
            acc += tl.sum(x.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)
        x_ptrs += SPLIT_K * BLOCK_K * stride_xk
        w_ptrs += SPLIT_K * BLOCK_K * stride_wk
    _pdl_trigger(PDL, 3)
    if BLOCK_M == 1 and not ONE_STEP:
        acc += tl.sum(acc_nk, axis=1)[None, :]
    acc = acc * scale[None, :]
    _store_gemv_rows(acc, y_ptr, p_ptr, c_ptr, bias, pid_m, pid_n, pid_k, M, N, stride_ym, stride_yn, HAS_BIAS, BLOCK_M, BLOCK_N, SPLIT_K)


# ============================================================================================
# Part 2: host wrapper
# ============================================================================================


def int8_weight_only_matmul(
    x: torch.Tensor,
    w_int8: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: dict[str, Any] | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """y [M, N] = (x [M, K] @ w_int8[N, K]^T) * scales[N] (+ bias[N]), in x's dtype.

    `config`: "path" ("gemv" | "tiled"; default GEMV for M <= 8) and that path's keys (see
    `int8_gemv_configs` / `tiled.int8_tiled_configs`); missing keys take the path's default.
    `out`: an optional preallocated [M, N] output of x's dtype.
    """
    _check_activations(x)
    if w_int8.dim() != 2 or w_int8.dtype != torch.int8:
        raise ValueError(f"w_int8 must be a 2-D int8 tensor [N, K], got {tuple(w_int8.shape)} {w_int8.dtype}")
    m, k = x.shape
    n = w_int8.shape[0]
    if w_int8.shape[1] != k:
        raise ValueError(f"x has K={k} features but w_int8 is {tuple(w_int8.shape)} (expected [N, {k}])")
    if k == 0 or n == 0:
        raise ValueError(f"empty problem: N={n}, K={k}")
    if w_int8.device != x.device:
        raise ValueError(f"w_int8 is on {w_int8.device}, x on {x.device}")
    _check_vector("scales", scales, n, x.device)
    y, path = _output_and_path(x, n, bias, out, config)
    if path is None:
        return y
    shape = (m, n, k)
    if path == "gemv":
        _int8_gemv(x, w_int8, scales, bias, y, {**int8_gemv_default_config(shape, x.dtype), **(config or {})})
    else:
        _int8_tiled(x, w_int8, scales, bias, y, {**int8_tiled_default_config(shape, x.dtype), **(config or {})})
    return y


def _int8_gemv(x, w_int8, scales, bias, y, cfg) -> None:
    """The int8 GEMV (`_int8_gemv_kernel`) into y [M, N], config `cfg` (checked here)."""
    m, k = x.shape
    n = w_int8.shape[0]
    _positive_pow2(cfg, "BLOCK_N", "BLOCK_K", "SPLIT_K")
    block_m, split_k = _block_m(m), cfg["SPLIT_K"]
    grid = (_cdiv(n, cfg["BLOCK_N"]), split_k, _cdiv(m, block_m))
    partials, counters = _split_k_buffers(split_k, m, n, grid[0] * grid[2], y)
    jit_kernel(_int8_gemv_kernel)[grid](
        x, w_int8, scales, bias if bias is not None else scales, y, partials, counters,
        m, n, k,
        x.stride(0), x.stride(1), w_int8.stride(0), w_int8.stride(1), y.stride(0), y.stride(1),
        HAS_BIAS=bias is not None, EVEN_K=k % cfg["BLOCK_K"] == 0,
        BLOCK_M=block_m, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], SPLIT_K=split_k, STAGES=_stages(cfg),
        CVT_ASM=_ptx(INT8_TO_F32_ASM), **_launch_options(cfg), **pdl_options(x, cfg),
    )


# ============================================================================================
# Part 3: quantiser and PyTorch reference
# ============================================================================================


def quantize_int8_per_channel(w: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] -> (q [N, K] int8, scales [N] in `dtype`, default W's): the int8 format (`formats.quantize_int8_rowwise`)."""
    return quantize_int8_rowwise(w, dtype)


def int8_reference(x: torch.Tensor, w_int8: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ (w_int8 * scales[:, None])^T + bias, dequantised in float64 (x float64) or float32; x's dtype out."""
    dt = _ref_dtype(x)
    y = x.to(dt) @ (w_int8.to(dt) * scales.to(dt)[:, None]).t()  # [M, N]
    if bias is not None:
        y = y + bias.to(dt)
    return y.to(x.dtype)


# ============================================================================================
# Part 4: configuration space and KernelSpecs
# ============================================================================================


def _int8_gemv_space(m: int, n: int, k: int) -> list[dict[str, Any]]:
    """BLOCK_N x BLOCK_K tiles from 1 row x 4 KB (long rows in flight) to 32 rows x 256 B, warps,
    and SPLIT_K (fixed up in the kernel) where the output blocks alone would leave SMs idle; the
    loop streamed through shared memory two steps ahead (STAGES 3); programs of one step also
    straight to registers (STAGES 1), summed at once, which won some shapes under PDL (docs/kernels.md)."""
    bm = _block_m(m)
    out = []
    for bn, bk, nw in itertools.product((1, 2, 4, 8, 16, 32), (256, 512, 1024, 2048, 4096), (4, 8)):
        per_thread = bm * bn * bk // (32 * nw)  # fp32 products per thread per step
        if bk > max(256, pow2_bucket(k)) or not 8 <= per_thread <= _MAX_ACC_PER_THREAD:
            continue
        for split in _split_ks(_cdiv(n, bn) * _cdiv(m, bm), _cdiv(k, bk)):
            out.append({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": nw, "num_stages": 1, "STAGES": 3})
            if split * bk >= k:  # one step a program: nothing to stream ahead, loads straight to registers too
                out.append({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": nw, "num_stages": 1, "STAGES": 1})
    return out


def int8_gemv_configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    m, n, k = shape[:3]
    return _int8_gemv_space(m, n, k)


def int8_gemv_default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    """H100 exploration (llama-8b shapes): 8 rows x 1 KB steps up to ~8K outputs, 16 x 256 B past
    that, the loop streamed through shared memory two steps ahead (STAGES 3)."""
    m, n, k = shape[:3]
    if m <= 2 and n <= 8192:
        return {"BLOCK_N": 8, "BLOCK_K": min(1024, max(256, pow2_bucket(k))), "SPLIT_K": 1, "num_warps": 4, "num_stages": 1, "STAGES": 3}
    return {"BLOCK_N": 16, "BLOCK_K": 256 if m <= 2 else 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 1, "STAGES": 3}


def _make_int8_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
    m, n, k = shape[:3]
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen, device="cpu") / k**0.5  # [N, K] fp32, Linear-like magnitudes
    q, scales = quantize_int8_per_channel(w, dtype)
    x = torch.randn(m, k, generator=gen, device="cpu").to(dtype)
    bias = (torch.randn(n, generator=gen, device="cpu") * 0.1).to(dtype)
    return x.to(device), q.to(device), scales.to(device), bias.to(device)


def _int8_bytes(shape: tuple[int, ...], dtype: torch.dtype, bias: bool = True) -> float:
    m, n, k = shape[:3]
    e = _elt(dtype)
    return float(n * k + n * e + bias * n * e + m * k * e + m * n * e)  # weight, scales, bias, x, y


def _gemv_bucket(shape: tuple[int, ...]) -> str:
    """The int8 GEMV's buckets: "v4" since its shape is compiled in (older tunings timed the runtime-shape kernel)."""
    return _bucket(shape) + "_v4"


for _path, _configs, _default in (("gemv", int8_gemv_configs, int8_gemv_default_config), ("tiled", int8_tiled_configs, int8_tiled_default_config)):
    register_kernel(
        KernelSpec(
            name=f"int8_{_path}",
            configs=_configs,
            default_config=_default,
            launch=_with_path(int8_weight_only_matmul, _path),
            reference=int8_reference,
            make_inputs=_decode_inputs(_make_int8_inputs) if _path == "gemv" else _make_int8_inputs,
            flops=_flops,
            bytes=functools.partial(_int8_bytes, bias=False) if _path == "gemv" else _int8_bytes,  # `_decode_inputs`: no bias
            bucket=_gemv_bucket if _path == "gemv" else _bucket,
            refinements=pdl_trigger_refinements if _path == "gemv" else None,
        )
    )

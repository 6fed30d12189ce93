"""General matmul with a fused epilogue: C = cast(act(A @ B + bias) + residual), one Triton kernel.

Four parts, as in Triton's tutorial 03-matrix-multiplication:

1. `matmul_kernel` (`@triton.jit`): each program computes one [BLOCK_M, BLOCK_N] tile of C, walking
   K in BLOCK_K steps with an fp32 accumulator; programs are ordered in groups of GROUP_M tile-rows
   so that consecutive programs share A and B tiles in L2. The epilogue (bias, activation,
   residual, cast) runs on the accumulator in registers, so C is written once. With SPLIT_K > 1 a
   second grid axis splits K: each program atomically adds its partial tile into an fp32 buffer
   and `matmul_epilogue_kernel` (a small elementwise kernel) applies the epilogue afterwards; with
   no epilogue and an fp32 output the partial tiles are added into the output directly.
   `matmul_tma_kernel` (config TMA=True), after Triton's tutorial 09-persistent-matmul: one
   program per SM walks the tiles in the same grouped order, A and B blocks come by TMA (tensor
   descriptors made on the device) into a software pipeline that runs across tiles. Same
   epilogue; no split-K. (Triton's warp specialization of this loop was tried and dropped: it
   computed wrong results; docs/kernels.md, "Tried and not kept".)
2. `matmul(...)`: the host wrapper (checks, allocation, grid) taking an explicit `config`.
3. `matmul_reference(...)`: PyTorch, in the inputs' dtype (float64 for accuracy tests).
4. `KernelSpec`s "matmul" and "matmul_bias_gelu" (nn.Linear + GELU) with the configuration space.

Inputs are fp16, bf16 or fp32 (A and B alike), any M, N, K (masked), any strides; B is [K, N], or
[N, K] (the nn.Linear weight layout) with `b_transposed=True`, read through its strides without a
copy. fp32 inputs are multiplied exactly (IEEE fp32) unless the config sets ALLOW_TF32.

Triton is imported when this module is: set TRITON_INTERPRET=1 (CPU tests) before importing it.
Without Triton the module still imports (the specs register) and `matmul` raises a clear error.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from agnitra.kernels.spec import KernelSpec, pow2_bucket, register_kernel

from agnitra.kernels._triton import HAVE_TRITON as _HAVE_TRITON
from agnitra.kernels._triton import tl, triton

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages", "ALLOW_TF32", "TMA")

# sm_90 (H100/H200): the most shared memory one block may use (227 KB, opt-in) and the SM count.
SMEM_LIMIT_BYTES = 227 * 1024
HOPPER_SMS = 132
# The persistent TMA kernel's program count under the interpreter (CPU tensors): small, so that each
# program walks several tiles in the tests.
INTERPRETER_SMS = 4


# ------------------------------------------------------------------------------------------------
# 1. Kernels
# ------------------------------------------------------------------------------------------------


@triton.jit
def _epilogue(
    acc,  # [BLOCK_M, BLOCK_N] fp32 accumulator (A @ B for this tile)
    offs_m,  # [BLOCK_M] row indices of the tile in C (may run past M: masked)
    offs_n,  # [BLOCK_N] column indices of the tile in C (may run past N: masked)
    M,  # rows of C
    N,  # columns of C
    bias_ptr,  # *bias [N], contiguous (read only if HAS_BIAS)
    residual_ptr,  # *residual [M, N] (read only if HAS_RESIDUAL)
    stride_rm,  # residual stride between rows, in elements
    stride_rn,  # residual stride between columns, in elements
    HAS_BIAS: tl.constexpr,  # add bias[n] to every row
    HAS_RESIDUAL: tl.constexpr,  # add residual[m, n] after the activation
    ACTIVATION: tl.constexpr,  # "" | "relu" | "gelu" | "gelu_tanh" | "silu"
):
    """acc + bias, then activation, then + residual; all in fp32 (the caller casts and stores)."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":  # exact: x * Phi(x)
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # 0.5 x (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3)
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
    if HAS_RESIDUAL:
        r_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        r_ptrs = residual_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn
        acc = acc + tl.load(r_ptrs, mask=r_mask, other=0.0).to(tl.float32)
    return acc


@triton.jit
def _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of C tile number `tile_id` in grouped order (`matmul_kernel`'s programs,
    `matmul_tma_kernel`'s tiles): GROUP_M tile-rows at a time, column-major inside a group, so the
    tiles in flight at once share a few row-panels of A and column-panels of B in L2."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile_id % num_pid_in_group) % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _epilogue_store(
    acc,  # [TILE_M, TILE_N] fp32 accumulator of the C block at (off_m, off_n)
    off_m,  # first row of the block in C
    off_n,  # first column of the block in C
    M, N, c_ptr, bias_ptr, residual_ptr, stride_cm, stride_cn, stride_rm, stride_rn,  # as in matmul_tma_kernel
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACTIVATION: tl.constexpr, INT64_OFFSETS: tl.constexpr,
):
    """`_epilogue` on one block of C, then its masked store (rows past M, columns past N dropped)."""
    offs_cm = off_m + tl.arange(0, acc.shape[0])
    offs_cn = off_n + tl.arange(0, acc.shape[1])
    if INT64_OFFSETS:
        offs_cm = offs_cm.to(tl.int64)
        offs_cn = offs_cn.to(tl.int64)
    acc = _epilogue(acc, offs_cm, offs_cn, M, N, bias_ptr, residual_ptr, stride_rm, stride_rn, HAS_BIAS, HAS_RESIDUAL, ACTIVATION)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def matmul_kernel(
    a_ptr,  # *A [M, K] (fp16 | bf16 | fp32)
    b_ptr,  # *B [K, N], same dtype as A (an [N, K] weight is passed with swapped strides)
    c_ptr,  # *C [M, N] output (any float dtype); with ATOMIC the fp32 buffer the K-splits add into
    bias_ptr,  # *bias [N] (ignored unless HAS_BIAS; any valid pointer otherwise)
    residual_ptr,  # *residual [M, N] (ignored unless HAS_RESIDUAL)
    M,  # rows of A and C
    N,  # columns of B and C
    K,  # columns of A, rows of B (the reduction)
    stride_am,  # A: elements between rows
    stride_ak,  # A: elements between columns
    stride_bk,  # B: elements between rows (along K)
    stride_bn,  # B: elements between columns (along N)
    stride_cm,  # C: elements between rows
    stride_cn,  # C: elements between columns
    stride_rm,  # residual: elements between rows
    stride_rn,  # residual: elements between columns
    BLOCK_M: tl.constexpr,  # rows of C per program
    BLOCK_N: tl.constexpr,  # columns of C per program
    BLOCK_K: tl.constexpr,  # K step of the inner loop
    GROUP_M: tl.constexpr,  # tile-rows per group of programs (L2 reuse)
    SPLIT_K: tl.constexpr,  # programs sharing one tile along K (grid axis 1)
    ATOMIC: tl.constexpr,  # add the fp32 partial tile into c_ptr atomically, no epilogue
    HAS_BIAS: tl.constexpr,  # fuse + bias[n]
    HAS_RESIDUAL: tl.constexpr,  # fuse + residual[m, n] after the activation
    ACTIVATION: tl.constexpr,  # "" | "relu" | "gelu" | "gelu_tanh" | "silu"
    INPUT_PRECISION: tl.constexpr,  # tl.dot input precision for fp32 inputs: "ieee" | "tf32"
    INT64_OFFSETS: tl.constexpr,  # some tensor holds >= 2**31 elements: index in int64
    EVEN_K: tl.constexpr,  # K is a multiple of BLOCK_K * SPLIT_K: no K masks
):
    # -- which tile of C this program computes: grouped ordering ------------------------------------
    # Programs are launched in groups of GROUP_M tile-rows, column-major inside a group, so the
    # programs running at the same time read GROUP_M row-panels of A and a few column-panels of B.
    pid_k = tl.program_id(axis=1)
    pid_m, pid_n = _grouped_tile(tl.program_id(axis=0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

    # -- pointers to the first A [BLOCK_M, BLOCK_K] and B [BLOCK_K, BLOCK_N] blocks --------------------
    # Rows of A and columns of B past the edge wrap around (% M, % N): those loads need no mask and
    # their results land in rows/columns of C that the store masks off. K is masked in the loop.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    if INT64_OFFSETS:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    # -- the K loop: this program takes K-blocks pid_k, pid_k + SPLIT_K, ... -------------------------
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K * SPLIT_K)):
        if EVEN_K:  # every K-block is whole: unpredicated loads the pipeliner streams freely
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_remaining = K - k * BLOCK_K * SPLIT_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_remaining, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_remaining, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * SPLIT_K * stride_ak
        b_ptrs += BLOCK_K * SPLIT_K * stride_bk

    # -- epilogue and store ---------------------------------------------------------------------
    if ATOMIC:
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        if INT64_OFFSETS:
            offs_cm = offs_cm.to(tl.int64)
            offs_cn = offs_cn.to(tl.int64)
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.atomic_add(c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :], acc, mask=c_mask, sem="relaxed")
    else:
        _epilogue_store(acc, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, c_ptr, bias_ptr, residual_ptr, stride_cm, stride_cn, stride_rm, stride_rn,
                        HAS_BIAS, HAS_RESIDUAL, ACTIVATION, INT64_OFFSETS)


@triton.jit
def matmul_tma_kernel(
    a_ptr,  # *A [M, K] (fp16 | bf16 | fp32): unit column stride, 16-byte aligned base and rows
    b_ptr,  # *B: [N, K] if B_TRANSPOSED (the nn.Linear weight) else [K, N]; same dtype and rules as A
    c_ptr,  # *C [M, N] output (any float dtype, any strides)
    bias_ptr,  # *bias [N] (ignored unless HAS_BIAS; any valid pointer otherwise)
    residual_ptr,  # *residual [M, N] (ignored unless HAS_RESIDUAL)
    M,  # rows of A and C
    N,  # columns of C
    K,  # the reduction
    stride_am,  # A: elements between rows
    stride_b,  # B: elements between rows of the stored matrix ([N, K] or [K, N])
    stride_cm,  # C: elements between rows
    stride_cn,  # C: elements between columns
    stride_rm,  # residual: elements between rows
    stride_rn,  # residual: elements between columns
    BLOCK_M: tl.constexpr,  # rows of a C tile
    BLOCK_N: tl.constexpr,  # columns of a C tile
    BLOCK_K: tl.constexpr,  # K step of the inner loop
    GROUP_M: tl.constexpr,  # tile-rows per group (L2 reuse)
    NUM_SMS: tl.constexpr,  # the stride of the tile loop: the SM count (the grid is at most this)
    B_TRANSPOSED: tl.constexpr,  # B is stored [N, K]
    HAS_BIAS: tl.constexpr,  # fuse + bias[n]
    HAS_RESIDUAL: tl.constexpr,  # fuse + residual[m, n] after the activation
    ACTIVATION: tl.constexpr,  # "" | "relu" | "gelu" | "gelu_tanh" | "silu"
    INPUT_PRECISION: tl.constexpr,  # tl.dot input precision for fp32 inputs: "ieee" | "tf32"
    INT64_OFFSETS: tl.constexpr,  # C or the residual holds >= 2**31 elements: index the epilogue in int64
):
    """Persistent matmul: each program walks the C tiles pid, pid + NUM_SMS, ... in grouped order.
    A and B blocks arrive by TMA (the copy engine computes the addresses and zero-fills what lies
    past the tensor's edge: no masks and no per-thread address arithmetic in the K loop) into
    shared memory, where wgmma reads them. The epilogue is `matmul_kernel`'s."""
    # Descriptors made on the device, once per program (Triton writes them to a global scratch that
    # the launch allocates through `triton.set_allocator`). TMA needs a unit last stride and
    # 16-byte aligned rows: the host wrapper checks. Blocks past M, N or K come back as zeros,
    # which add nothing to the dot; rows and columns past M and N are masked at the store.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_TRANSPOSED:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1], block_shape=[BLOCK_K, BLOCK_N])

    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    # The tile loop is flattened into the K loop, so one software pipeline runs across tiles: the
    # next tile's first loads are in flight during this tile's epilogue.
    for tile_id in tl.range(tl.program_id(axis=0), num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, k_tiles):
            a = a_desc.load([off_m, k * BLOCK_K])
            if B_TRANSPOSED:  # a [BLOCK_N, BLOCK_K] block, used transposed: wgmma reads either layout from shared memory
                b = b_desc.load([off_n, k * BLOCK_K]).T
            else:
                b = b_desc.load([k * BLOCK_K, off_n])
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)

        # Two [BLOCK_M, BLOCK_N / 2] halves: the pipeline's buffers stay allocated across tiles, so
        # the shared-memory scratch of the store's layout conversion comes on top of them, and
        # halves need half of it (64 KB instead of 128 KB for a 128x256 fp32 output).
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc_left, acc_right = tl.split(halves)
        _epilogue_store(acc_left, off_m, off_n, M, N, c_ptr, bias_ptr, residual_ptr, stride_cm, stride_cn, stride_rm, stride_rn,
                        HAS_BIAS, HAS_RESIDUAL, ACTIVATION, INT64_OFFSETS)
        _epilogue_store(acc_right, off_m, off_n + BLOCK_N // 2, M, N, c_ptr, bias_ptr, residual_ptr, stride_cm, stride_cn,
                        stride_rm, stride_rn, HAS_BIAS, HAS_RESIDUAL, ACTIVATION, INT64_OFFSETS)


@triton.jit
def matmul_epilogue_kernel(
    acc_ptr,  # *fp32 [M, N] the summed K-splits (contiguous)
    c_ptr,  # *C [M, N] output
    bias_ptr,  # *bias [N] (ignored unless HAS_BIAS)
    residual_ptr,  # *residual [M, N] (ignored unless HAS_RESIDUAL)
    M,  # rows of C
    N,  # columns of C
    stride_cm,  # C: elements between rows
    stride_cn,  # C: elements between columns
    stride_rm,  # residual: elements between rows
    stride_rn,  # residual: elements between columns
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # columns per program
    HAS_BIAS: tl.constexpr,  # fuse + bias[n]
    HAS_RESIDUAL: tl.constexpr,  # fuse + residual[m, n] after the activation
    ACTIVATION: tl.constexpr,  # "" | "relu" | "gelu" | "gelu_tanh" | "silu"
    INT64_OFFSETS: tl.constexpr,  # some tensor holds >= 2**31 elements: index in int64
):
    """The split-K epilogue: C = cast(act(acc + bias) + residual), elementwise over [M, N] tiles."""
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64_OFFSETS:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.load(acc_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, residual_ptr, stride_rm, stride_rn, HAS_BIAS, HAS_RESIDUAL, ACTIVATION)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


# ------------------------------------------------------------------------------------------------
# 2. Host wrapper
# ------------------------------------------------------------------------------------------------

_EPILOGUE_BLOCK = (32, 128)  # [BLOCK_M, BLOCK_N] of the split-K epilogue kernel


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    residual: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    config: dict[str, Any] | None = None,
    *,
    b_transposed: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """C [M, N] = cast(activation(a @ b + bias) + residual) in one kernel (fp32 accumulation).

    a: [M, K]; b: [K, N], or [N, K] with `b_transposed=True` (nn.Linear's weight: then this is
    `F.linear(a, b, bias)`); bias: [N]; residual: [M, N]; all on one device, A and B of one dtype
    (fp16, bf16, fp32), bias and residual any float dtype. out_dtype defaults to A's dtype; `out`
    ([M, N], that dtype) is written in place when given. `config` holds the keys of
    `matmul_configs` entries; keys left out take `matmul_default_config`'s values.

    SPLIT_K > 1 handles every epilogue: the K-splits add into an fp32 buffer (atomics, so the sum's
    order, and the last bits of the result, may vary between runs) and a second small kernel
    applies the epilogue; with no epilogue and an fp32 output they add into the output directly.

    TMA=True runs `matmul_tma_kernel` (persistent, TMA loads). It needs a and b with a unit last stride and 16-byte aligned base
    addresses and row strides, and SPLIT_K=1; otherwise a ValueError says what to change.
    """
    # -- checks -------------------------------------------------------------------------------------
    if not _HAVE_TRITON:
        raise RuntimeError("Triton is not installed (pip install triton, or the agnitra[gpu] extra)")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul takes 2-D a and b, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype not in DTYPES or b.dtype != a.dtype:
        raise ValueError(f"a and b must share one dtype of fp16, bf16, fp32; got {a.dtype} and {b.dtype}")
    M, K = a.shape
    N, Kb = (b.shape[0], b.shape[1]) if b_transposed else (b.shape[1], b.shape[0])
    if Kb != K:
        layout = "[N, K] (b_transposed)" if b_transposed else "[K, N]"
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b {layout} is {tuple(b.shape)}")
    if b.device != a.device:
        raise ValueError(f"a is on {a.device}, b on {b.device}")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{activation}'; one of {', '.join(ACTIVATIONS)} or None")
    if bias is not None:
        if bias.shape != (N,) or bias.device != a.device:
            raise ValueError(f"bias must be [{N}] on {a.device}, got {tuple(bias.shape)} on {bias.device}")
        bias = bias.contiguous()
    if residual is not None and (residual.shape != (M, N) or residual.device != a.device):
        raise ValueError(f"residual must be [{M}, {N}] on {a.device}, got {tuple(residual.shape)} on {residual.device}")
    out_dtype = out_dtype or a.dtype
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)  # [M, N]
    elif out.shape != (M, N) or out.dtype != out_dtype or out.device != a.device:
        raise ValueError(f"out must be [{M}, {N}] {out_dtype} on {a.device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    cfg = _complete_config(config, (M, N, K), a.dtype)
    if cfg["TMA"]:
        _check_tma(a, b, out, cfg)
    if M == 0 or N == 0:
        return out

    # b's strides along K and N: an [N, K] weight is B^T, read in place
    stride_bk, stride_bn = (b.stride(1), b.stride(0)) if b_transposed else (b.stride(0), b.stride(1))
    stride_rm, stride_rn = residual.stride() if residual is not None else (0, 0)
    int64 = max(a.numel(), b.numel(), out.numel(), residual.numel() if residual is not None else 0) >= 2**31
    # fp32: exact IEEE products unless ALLOW_TF32; 16-bit operands ignore it ("tf32" is Triton's default)
    precision = "ieee" if (a.dtype == torch.float32 and not cfg["ALLOW_TF32"]) else "tf32"
    has_epilogue = bias is not None or activation is not None or residual is not None
    split_k = cfg["SPLIT_K"]
    if cfg["TMA"]:
        _launch_tma(a, b, bias, activation, residual, out, cfg, b_transposed=b_transposed, int64=int64, precision=precision)
        return out

    # -- launch -------------------------------------------------------------------------------------
    # grid axis 0: output tiles (grouped order is computed in the kernel); axis 1: K-splits
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), split_k)
    if split_k == 1:
        target = out
    elif not has_epilogue and out_dtype == torch.float32:
        target = out.zero_()  # the K-splits add into the output itself
    else:
        target = torch.zeros((M, N), device=a.device, dtype=torch.float32)  # [M, N] fp32 sum of K-splits
    dummy = target  # any pointer for arguments the kernel does not read
    matmul_kernel[grid](
        a, b, target,
        bias if bias is not None else dummy,
        residual if residual is not None else dummy,
        M, N, K,
        a.stride(0), a.stride(1),
        stride_bk, stride_bn,
        target.stride(0), target.stride(1),
        stride_rm, stride_rn,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
        GROUP_M=cfg["GROUP_M"], SPLIT_K=split_k, ATOMIC=split_k > 1,
        HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, ACTIVATION=activation or "",
        INPUT_PRECISION=precision, INT64_OFFSETS=int64, EVEN_K=K % (cfg["BLOCK_K"] * split_k) == 0,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    if target is not out:
        em, en = _EPILOGUE_BLOCK
        matmul_epilogue_kernel[(triton.cdiv(M, em), triton.cdiv(N, en))](
            target, out,
            bias if bias is not None else dummy,
            residual if residual is not None else dummy,
            M, N,
            out.stride(0), out.stride(1),
            stride_rm, stride_rn,
            BLOCK_M=em, BLOCK_N=en,
            HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, ACTIVATION=activation or "",
            INT64_OFFSETS=int64,
            num_warps=4,
        )
    return out


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    """Programs of the persistent kernel: the SM count on a GPU, INTERPRETER_SMS on the CPU (read once a device)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SMS


@functools.lru_cache(maxsize=None)
def _tma_scratch(device: torch.device):
    """The allocator `triton.set_allocator` takes for `device`: the device-side TMA descriptors are
    written to a small global buffer (128 bytes a descriptor and program) allocated at launch."""

    def allocate(size: int, alignment: int, stream: int | None) -> torch.Tensor:
        return torch.empty(size, dtype=torch.uint8, device=device)  # the caching allocator aligns to 512 bytes

    return allocate


def tma_refusal(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, cfg: dict[str, Any]) -> str | None:
    """Why the TMA kernel cannot take these tensors with `cfg` (a one-line message naming the fix), or None.

    A tensor descriptor needs a unit last stride, a 16-byte aligned base address and 16-byte
    aligned row strides; the config's shared memory must fit with this output dtype."""
    for name, t in (("a", a), ("b", b)):
        if t.stride(1) != 1:
            return f"TMA needs {name} with a unit last stride, got strides {tuple(t.stride())}: pass it .contiguous() or use a config without TMA"
        row_bytes = t.stride(0) * t.element_size()
        if row_bytes % 16:
            return f"TMA needs {name}'s rows 16-byte aligned, got a row stride of {row_bytes} bytes: pad its rows or use a config without TMA"
        if t.data_ptr() % 16:
            return f"TMA needs {name}'s base address 16-byte aligned, it is {t.data_ptr() % 16} bytes off: copy it or use a config without TMA"
    need = smem_bytes(cfg, a.dtype, out_dtype=out_dtype)
    if need > SMEM_LIMIT_BYTES:
        return (f"this TMA config needs about {need // 1024} KB of shared memory with a {out_dtype} output (limit {SMEM_LIMIT_BYTES // 1024} KB): "
                "use fewer stages or smaller blocks, or a config without TMA")
    return None


def config_for_tensors(config: dict[str, Any], shape: tuple[int, int, int], a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> dict[str, Any]:
    """A bucket's tuned `config` for these very tensors (problem `shape` = (M, N, K)): a TMA config
    whose rules they break (a K that is not a multiple of 8 in the same power-of-two bucket, a
    misaligned view) gives way to the problem's default configuration; any other is returned as is."""
    if not config.get("TMA") or tma_refusal(a, b, out_dtype, _complete_config(config, shape, a.dtype)) is None:
        return config
    return matmul_default_config(shape, a.dtype)


def _check_tma(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, cfg: dict[str, Any]) -> None:
    """Raise ValueError when the TMA kernel cannot take these tensors (see `tma_refusal`)."""
    reason = tma_refusal(a, b, out.dtype, cfg)
    if reason:
        raise ValueError(reason)


def _launch_tma(a, b, bias, activation, residual, out, cfg, *, b_transposed: bool, int64: bool, precision: str) -> None:
    """Launch `matmul_tma_kernel` on checked arguments: one program per SM (at most one per tile)."""
    num_sms = _num_sms(a.device)
    M, K = a.shape
    N = out.shape[1]
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    if a.device.type == "cuda":
        triton.set_allocator(_tma_scratch(a.device))
    stride_rm, stride_rn = residual.stride() if residual is not None else (0, 0)
    matmul_tma_kernel[(min(num_sms, tiles),)](
        a, b, out,
        bias if bias is not None else out,
        residual if residual is not None else out,
        M, N, K,
        a.stride(0), b.stride(0),
        out.stride(0), out.stride(1),
        stride_rm, stride_rn,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
        NUM_SMS=num_sms, B_TRANSPOSED=b_transposed,
        HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, ACTIVATION=activation or "",
        INPUT_PRECISION=precision, INT64_OFFSETS=int64,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )


def _complete_config(config: dict[str, Any] | None, shape: tuple[int, int, int], dtype: torch.dtype) -> dict[str, Any]:
    """`config` over the default for this problem; unknown keys and bad values raise."""
    config = dict(config or {})
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise ValueError(f"unknown matmul config keys {sorted(unknown)}; known: {', '.join(CONFIG_KEYS)}")
    cfg = {**matmul_default_config(shape, dtype), **config}
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        if cfg[key] < 16 or cfg[key] & (cfg[key] - 1):
            raise ValueError(f"{key} must be a power of two >= 16, got {cfg[key]}")
    if cfg["GROUP_M"] < 1 or cfg["SPLIT_K"] < 1:
        raise ValueError(f"GROUP_M and SPLIT_K must be >= 1, got {cfg['GROUP_M']} and {cfg['SPLIT_K']}")
    if cfg["TMA"] and cfg["SPLIT_K"] != 1:
        raise ValueError(f"the TMA kernel does not split K (SPLIT_K={cfg['SPLIT_K']}): use SPLIT_K=1, or a config without TMA")
    return cfg


# ------------------------------------------------------------------------------------------------
# 3. Reference
# ------------------------------------------------------------------------------------------------


def apply_activation(x: torch.Tensor, activation: str | None) -> torch.Tensor:
    """The activations of the epilogue, in PyTorch (any dtype, float64 included)."""
    if activation is None:
        return x
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return torch.nn.functional.gelu(x)
    if activation == "gelu_tanh":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if activation == "silu":
        return torch.nn.functional.silu(x)
    raise ValueError(f"unknown activation '{activation}'")


def matmul_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    residual: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    b_transposed: bool = False,
) -> torch.Tensor:
    """What `matmul` computes, in PyTorch, in a's dtype (pass float64 tensors for a reference)."""
    c = a @ (b.t() if b_transposed else b)  # [M, N]
    if bias is not None:
        c = c + bias.to(c.dtype)
    c = apply_activation(c, activation)
    if residual is not None:
        c = c + residual.to(c.dtype)
    return c if out_dtype is None else c.to(out_dtype)


# ------------------------------------------------------------------------------------------------
# 4. Configuration space and KernelSpecs
# ------------------------------------------------------------------------------------------------


def smem_bytes(config: dict[str, Any], dtype: torch.dtype, out_dtype: torch.dtype | None = None) -> int:
    """Shared memory of the software pipeline: num_stages copies of an A and a B block.

    The TMA kernel also keeps its pipeline allocated through the epilogue (it holds the next
    tile's loads), so the scratch of the epilogue's layout conversions adds to it: a whole C tile
    in the output dtype (out_dtype, default `dtype`), plus 1 KB of barriers. An upper bound of
    what Triton 3.6 allocates for sm_90: half a tile with 16-byte aligned strides, a whole one
    with bias and residual on strides it cannot prove aligned (128x256x64, 4 stages, bf16:
    229,408 B and 262,176 B; the latter failed to launch on the H100).
    """
    elem = torch.empty((), dtype=dtype).element_size()
    pipeline = (config["BLOCK_M"] * config["BLOCK_K"] + config["BLOCK_K"] * config["BLOCK_N"]) * elem * config["num_stages"]
    if not config.get("TMA"):
        return pipeline
    out_elem = torch.empty((), dtype=out_dtype or dtype).element_size()
    return pipeline + config["BLOCK_M"] * config["BLOCK_N"] * out_elem + 1024


def fits_shared_memory(config: dict[str, Any], dtype: torch.dtype, limit: int = SMEM_LIMIT_BYTES) -> bool:
    return smem_bytes(config, dtype) <= limit


def _cfg(bm: int, bn: int, bk: int, warps: int, stages: int, split_k: int = 1, tma: bool = False) -> dict[str, Any]:
    # every config has every key: the TPE search (autotune._tpe) matches configs on all keys
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SPLIT_K": split_k,
            "num_warps": warps, "num_stages": stages, "ALLOW_TF32": False, "TMA": tma}


# (BLOCK_M, BLOCK_N, num_warps): 8 warps (two warpgroups on Hopper) for the big tiles, 4 for the
# small ones; at most 128 fp32 accumulator registers per thread (BLOCK_M * BLOCK_N / threads).
_TILES = (
    (128, 256, 8), (256, 128, 8), (256, 64, 8), (64, 256, 4), (64, 256, 8),
    (128, 128, 8), (128, 128, 4), (128, 64, 4), (64, 128, 4),
    (64, 64, 4), (128, 32, 4), (32, 128, 4), (32, 64, 4), (64, 32, 4), (32, 32, 4),
)
# (BLOCK_K, num_stages): deeper pipelines for shallower K blocks
_K_STAGES = ((32, 4), (32, 5), (64, 3), (64, 4), (128, 3))
# split-K candidates, for few output tiles and a long K: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
_SPLIT_K_TILES = ((32, 64, 128, 4, 4), (32, 128, 64, 4, 4), (64, 64, 128, 4, 3), (64, 128, 64, 4, 4), (128, 128, 64, 8, 3))
_SPLIT_K_FACTORS = (2, 4)
# TMA (persistent) candidates, for problems that fill the GPU: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages), 8 warps
_TMA_TILES = ((128, 256, 64, 3), (128, 128, 64, 4), (128, 128, 64, 5), (256, 128, 64, 3))
_TMA_DTYPES = (torch.float16, torch.bfloat16)  # the space offers TMA for 16-bit inputs (fp32 is not tensor-core bound)


def candidate_configs(shape: tuple[int, ...]) -> list[dict[str, Any]]:
    """Every configuration considered for this problem, before the shared-memory filter.

    Blocks at most the problem's size rounded up to a power of two (min 32): a 256-row block for
    M = 16 wastes 15/16 of its work. Split-K configs only when the output has few tiles (fewer than
    two waves of 64x128 tiles on 132 SMs) and K is long (>= 1024). TMA configs only when the output
    has at least two waves of 128x128 tiles (a persistent kernel pays off once every SM has several
    tiles) and contiguous 16-bit rows of A and B are 16-byte aligned (K and N multiples of 8);
    `matmul_configs` keeps them for fp16 and bf16 only.
    """
    M, N, K = shape
    max_m, max_n, max_k = (max(32, pow2_bucket(d)) for d in (M, N, K))
    found = []
    for bm, bn, warps in _TILES:
        if bm > max_m or bn > max_n:
            continue
        for bk, stages in _K_STAGES:
            if bk <= max_k:
                found.append(_cfg(bm, bn, bk, warps, stages))
    few_tiles = math.ceil(M / 64) * math.ceil(N / 128) < 2 * HOPPER_SMS
    if few_tiles and K >= 1024:
        for bm, bn, bk, warps, stages in _SPLIT_K_TILES:
            if bm <= max_m and bn <= max_n:
                for split_k in _SPLIT_K_FACTORS:
                    if K >= 4 * bk * split_k:  # each split gets >= 4 K-blocks
                        found.append(_cfg(bm, bn, bk, warps, stages, split_k))
    many_tiles = math.ceil(M / 128) * math.ceil(N / 128) >= 2 * HOPPER_SMS
    if many_tiles and K % 8 == 0 and N % 8 == 0:
        for bm, bn, bk, stages in _TMA_TILES:
            found.append(_cfg(bm, bn, bk, 8, stages, tma=True))
    return found


def matmul_configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    """The configuration space for (M, N, K) in `dtype`: candidates that fit sm_90 shared memory."""
    found = [c for c in candidate_configs(shape) if fits_shared_memory(c, dtype) and (not c["TMA"] or dtype in _TMA_DTYPES)]
    default = matmul_default_config(shape, dtype)
    if default not in found:
        found.insert(0, default)
    return found


def matmul_default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    """A solid config without tuning: Triton's tutorial choice for big problems, smaller blocks for
    small ones. Large square fp16/bf16: 128x256x64, 8 warps, 3 stages (144 KB of shared memory).
    fp32 (IEEE, no tensor cores) keeps BLOCK_N <= 128."""
    M, N, K = shape
    bm = min(128, max(32, pow2_bucket(M)))
    bn = min(256 if (bm == 128 and dtype != torch.float32) else 128, max(32, pow2_bucket(N)))
    bk = min(64, max(32, pow2_bucket(K)))
    warps = 8 if bm * bn >= 128 * 128 else 4
    stages = 3 if bm * bn >= 128 * 256 else 4
    cfg = _cfg(bm, bn, bk, warps, stages)
    while not fits_shared_memory(cfg, dtype) and cfg["num_stages"] > 2:
        cfg["num_stages"] -= 1
    while not fits_shared_memory(cfg, dtype) and cfg["BLOCK_K"] > 32:
        cfg["BLOCK_K"] //= 2
    return cfg


def _make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
    """(a [M, K], b [K, N]) with entries ~ N(0, 1) * K^(-1/4): C's entries are ~ N(0, 1)."""
    M, N, K = shape
    g = torch.Generator(device="cpu").manual_seed(seed)
    scale = K ** -0.25
    a = (torch.randn((M, K), generator=g, device="cpu") * scale).to(device=device, dtype=dtype)
    b = (torch.randn((K, N), generator=g, device="cpu") * scale).to(device=device, dtype=dtype)
    return a, b


def _make_linear_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
    """(x [M, K], weight [N, K], bias [N]): nn.Linear's layout."""
    M, N, K = shape
    a, b = _make_inputs(shape, dtype, device, seed)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    bias = (torch.randn((N,), generator=g, device="cpu") * 0.1).to(device=device, dtype=dtype)
    return a, b.t().contiguous(), bias


def _bytes(shape: tuple[int, ...], dtype: torch.dtype, extra: int = 0) -> float:
    M, N, K = shape
    return float((M * K + K * N + M * N + extra) * torch.empty((), dtype=dtype).element_size())


def _bucket(shape: tuple[int, ...]) -> str:
    """Power-of-two buckets, "_v2" since the TMA kernel joined the space (older tunings never saw it)."""
    M, N, K = shape
    return f"M{pow2_bucket(M)}_N{pow2_bucket(N)}_K{pow2_bucket(K)}_v2"


def _flops(shape: tuple[int, ...]) -> float:
    M, N, K = shape
    return 2.0 * M * N * K


register_kernel(KernelSpec(
    name="matmul",
    configs=matmul_configs,
    default_config=matmul_default_config,
    launch=lambda a, b, config=None: matmul(a, b, config=config),
    reference=lambda a, b: matmul_reference(a, b),
    make_inputs=_make_inputs,
    flops=_flops,
    bytes=_bytes,
    bucket=_bucket,
))

register_kernel(KernelSpec(
    name="matmul_bias_gelu",
    configs=matmul_configs,
    default_config=matmul_default_config,
    launch=lambda a, w, bias, config=None: matmul(a, w, bias, "gelu", config=config, b_transposed=True),
    reference=lambda a, w, bias: matmul_reference(a, w, bias, "gelu", b_transposed=True),
    make_inputs=_make_linear_inputs,
    flops=_flops,  # 2MNK: the epilogue's O(MN) work is not counted (comparable with cuBLAS)
    bytes=lambda shape, dtype: _bytes(shape, dtype, extra=shape[1]),  # + bias [N]
    bucket=_bucket,
))

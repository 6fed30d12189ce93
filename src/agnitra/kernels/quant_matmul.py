"""Weight-only quantised matmuls (int8 per output channel, int4 group-wise) in Triton.

y [M, N] = x [M, K] @ W'^T (+ bias [N]), where W' [N, K] is the dequantised weight. These are the
decode-step GEMVs of Llama-style models: torch.compile cannot fuse through the quantised weight
formats, and at batch 1 the time is the time to read the weight bytes once.

Formats (`agnitra.kernels.quant.formats`, which `agnitra.transforms.quantize` uses too):

* int8: symmetric per output row. `w_int8` [N, K] int8 (row n = output channel n, K contiguous),
  `scales` [N] (any float dtype; the transform stores them in the activation dtype):
  W'[n, k] = w_int8[n, k] * scales[n]. Since the scale is per row it factors out of the K sum:
  y[m, n] = scales[n] * sum_k x[m, k] * w_int8[n, k].
* int4: asymmetric per group of `group_size` (G) consecutive input features, tinygemm's form:
  W'[n, k] = (q[n, k] - 8) * scales[n, g] + zeros[n, g], g = k // G, codes q in 0..15.
  Packed layout read by these kernels: `w_packed` [N, K/2] uint8, TWO CODES PER BYTE, LOW NIBBLE =
  EVEN k: byte [n, j] = q[n, 2j] | (q[n, 2j+1] << 4) (`formats.pack_int4` / `unpack_int4`). NOTE:
  `transforms.quantize.pack_int4` ("reference" layout, `formats.pack_int4_high_first`) puts the even
  feature in the HIGH nibble and keeps scales and zeros as one [K/G, N, 2] tensor;
  `from_transform_int4` converts that form to this one (nibble swap + split/transpose). `scales`, `zeros`: [N, K/G] (any float dtype).
  Within a group the scale factors out too: sum_k x_k W'_k = s * sum_k x_k (q_k - 8) + z * sum_k x_k.

Kernels (Triton tutorial 03's layout: kernel, host wrapper, reference,
KernelSpec):

* GEMV (decode, M = 1..8): program (pid_n, pid_k, pid_m) owns BLOCK_N output channels and
  BLOCK_M (= next power of two of M, at most 8) rows, and walks K in BLOCK_K chunks (chunks pid_k,
  pid_k + SPLIT_K, ...); M > 8 with an explicit "gemv" path uses the third grid axis over blocks
  of 8 rows. int8: each chunk loads a [BLOCK_N, BLOCK_K] int8 tile (K contiguous: 16-byte loads
  per thread), converts it in registers and reduces x * w over K with `tl.sum` into an fp32
  [BLOCK_M, BLOCK_N] accumulator (no tl.dot: M is far below the MMA tile); for M = 1 it keeps a
  [BLOCK_N, BLOCK_K] fp32 accumulator and reduces it once after the loop. int4: each chunk loads
  [BLOCK_N, BLOCK_K/2] bytes, splits them into the even-k and odd-k nibbles, multiplies them by
  the even and odd elements of x, and applies the group's scale and zero once per chunk (BLOCK_K
  divides G). Codes become floats without conversion instructions (I2F runs at a quarter of the
  FMA rate and could bound a GEMV near memory speed): the integer is added / or-ed into the
  mantissa of 2^23 and 2^23 (+ offset) is subtracted, exactly. SPLIT_K > 1 writes
  scaled fp32 partials [SPLIT_K, M, N] and counts its arrival on a per-block counter; the block's
  last program sums the partials in a fixed order (deterministic), adds the bias, casts and resets
  the counter: no second launch (`_split_k_total`; every GEMV kernel here ends this way).
  STAGES > 1 (config key) asks Triton to stream the loop's loads through shared memory (cp.async,
  STAGES - 1 steps ahead): it pipelines a loop without tl.dot only when the loop itself asks
  (`tl.range(num_stages=...)`), never from the launch option. int8 runs at STAGES 3 by default.
* int4 at batch 1 ("rows", the default there for fp32 activations and under 1024 outputs): the
  packed bytes read as 32-bit words, a lane holding two words of each of several rows so the x
  values of its words serve all of them; one lop3 and one FMA a code (`_int4_gemv_rows_kernel`,
  about 4 instructions a code in the compiled loop); PREFETCH 2 requests all of the next step's
  reads (words, x, scales, zeros) a step ahead. "words" (`_int4_gemv_words_kernel`): the earlier
  word kernel, about five to six a code, kept in the space at its best shape; split-K fixed up in
  the kernel as for int8.
* int4 on tensor cores for M <= 8 ("tc", 16-bit activations, the default at batch 1 from 1024
  outputs): the weight pre-shuffled once (`shuffle_int4_for_tc`, cached on the weight tensor) so
  that each lane's 16-byte load is its A fragments of four mma.m16n8k16; inline PTX
  (`_INT4_TC_TILE`) turns code pairs into exact 16-bit MAGIC + q (one lop3) and issues the MMAs
  with x as B (batch rows padded to the MMA's 8 columns; a lane's x pairs are its B fragments as
  loaded); the group's scale and zero (pre-arranged as (s, z) pairs so a lane's two C rows are one
  8-byte load) apply to the fp32 sums, MAGIC + 8 taken off through the x sums, so the weight is
  never rounded. No shared memory in the loop; about 2.1-2.6 instructions a code. The asm is right
  only in the words' load layout: `test_int4_tc_asm_layout` compiles it for sm_90 and checks;
  under the interpreter the MMAs are emulated from the PTX ISA's fragment layouts
  (`_int4_tc_emulated`). One 16-row tile a warp on 4-8 warps, or small programs (1-4
  tiles on one or two warps, `_TC_NARROW`) in multi-wave grids that let the next kernel in at
  their PDL wait, so its programs take the slots theirs free. WARP_K: the warps split the step's
  features instead of the tiles, their sums met in shared memory after the loop; with one step a
  program (`_tc_held_shapes`: one-wave grids, 8-16 chunks a warp) every word is read before the
  PDL wait and held, no split-K fix-up (int4 4096x4096 on the H100: 5.2 against 5.53 us).
* int4 on tensor cores ("mma", 16-bit activations, M <= 16): codes become packed 16-bit floats by
  inline PTX (prmt / lop3 / fma.rn.x2: `INT4_ASM_BF16`, `INT4_ASM_FP16`; arithmetic under the
  interpreter) and tl.dot sums W_chunk @ x^T with M padded to 16. On the H100 it did not beat the
  byte kernel at batch 1 (gemv-explore-int4-mma-*.json), so it is offered only for M > 1.
* tiled (M > 8, prefill): tutorial 03's grouped tile loop. int8: the [BLOCK_K, BLOCK_N] weight tile
  is converted to x's dtype (exact: |q| <= 127) and fed to tl.dot with an fp32 accumulator; the
  per-column scale multiplies the accumulator once at the end. int4: the tile is dequantised per
  group (BLOCK_K divides G) in fp32, cast to x's dtype, and two dots (even k, odd k) accumulate;
  with TC_WORDS the tile comes from the tensor-core GEMV's words instead (`_tc_words_tile`: one
  permute puts them in natural order, x is read contiguously, one dot a step).
  fp32 activations use IEEE fp32 dots (input_precision="ieee", not tf32).

Numerics: every accumulation is fp32; the output is cast to x's dtype once. The int4 tiled path
rounds the dequantised weight to x's dtype before the dot (like `int4_reference_matmul`); the GEMV
paths never round the weight. Shapes need not be multiples of the blocks: out-of-range rows and
columns are wrapped on load and masked on store; int8's K tail is masked; int4 needs K % G == 0
and G % BLOCK_K == 0 (ValueError otherwise).

Triton is imported lazily: the kernel functions are plain Python here and are `triton.jit`-ed on
first launch (so TRITON_INTERPRET=1, read then, may be set after this module is imported).
"""

from __future__ import annotations

import functools
import itertools
import types
from typing import Any

import torch

from agnitra.kernels.quant.formats import from_transform_int4, int4_dequantize, pack_int4, quantize_int4_codes, quantize_int8_rowwise, unpack_int4  # noqa: F401 - from_transform_int4: callers find it here
from agnitra.kernels.pdl import _pdl_trigger, _pdl_wait, pdl_options, pdl_trigger_refinements  # noqa: F401 - _pdl_*: device helpers the kernels call (_DEVICE_HELPERS)
from agnitra.kernels.spec import KernelSpec, interpreting, pow2_bucket, register_kernel, triton_available

from agnitra.kernels._triton import tl  # the kernels' bodies refer to `tl`; compiled only with Triton

GEMV_MAX_M = 8  # the wrapper's automatic choice: GEMV for M <= 8, tiled above
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# ============================================================================================
# Part 1: Triton kernels
# ============================================================================================


def _split_k_total(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """In-kernel split-K fix-up, shared by the GEMV kernels (no second launch).

    Stores this program's fp32 partial at `p_ptrs + pid_k * split_stride` and counts its arrival
    on the block's counter. Returns (sum of the SPLIT_K partials in a fixed order: deterministic,
    True) to the block's last program, which also resets the counter, and (zeros, False) to the
    others. The caller adds its bias and stores when the flag is set. The reset is relaxed: the
    next launch is ordered after it by the launch itself, so nothing here waits for it (acq_rel
    put a fence and the exchange's round trip before the output's store: a fourth round trip after
    the loop; relaxed, 0.2-0.6 us faster at every split config of the int8 and int4 tensor-core
    GEMVs at llama-8b shapes on the H100, fixup-cost-*.json).
    """
    tl.store(p_ptrs + pid_k * split_stride, acc, mask=mask)
    tl.debug_barrier()  # every thread's partial is written before the arrival is counted
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel")
    last = arrived == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        for split in tl.static_range(SPLIT_K):
            total += tl.load(p_ptrs + split * split_stride, mask=mask, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(counter_ptr, 0, sem="relaxed")  # ready for the next launch
    return total, last


SLOT_EMPTY = 0x7FF0DEAD  # `_split_k_total_waiting`'s empty mark: a NaN no arithmetic makes (the GPU's NaNs are 0x7FFFFFFF)
_SLOT_EMPTY = tl.constexpr(SLOT_EMPTY) if tl is not None else SLOT_EMPTY  # the kernels' globals must be constexpr


def _read_slots(p_ptrs, split_stride, mask, acc, SPLIT_K: tl.constexpr):
    """One round of the waiting fix-up's reads, all issued at once: the sum in split order of slots
    0 .. SPLIT_K - 2, and how many still hold the empty mark (a count whole in each warp, not always
    block-wide: the caller's CTA barrier comes before any slot is emptied)."""
    total = tl.zeros_like(acc)
    marks = tl.zeros(acc.shape, tl.int32)
    for split in tl.static_range(SPLIT_K - 1):
        part = tl.load(p_ptrs + split * split_stride, mask=mask, other=0.0, volatile=True)
        marks += (part.to(tl.int32, bitcast=True) == _SLOT_EMPTY).to(tl.int32)
        total += part
    return total, tl.sum(marks)


def _empty_slots(p_ptrs, split_stride, mask, acc, SPLIT_K: tl.constexpr):
    """Slots 0 .. SPLIT_K - 2 marked empty again, for the next launch (after the caller's CTA barrier)."""
    mark = tl.full(acc.shape, _SLOT_EMPTY, tl.int32).to(tl.float32, bitcast=True)
    for split in tl.static_range(SPLIT_K - 1):
        tl.store(p_ptrs + split * split_stride, mark, mask=mask)


def _split_k_total_waiting(acc, p_ptrs, split_stride, mask, pid_k, SPLIT_K: tl.constexpr):
    """Split-K fix-up in one memory round trip (config FIXUP "wait"), for a grid launched
    cooperatively: every program is resident at once, so a program may wait on its siblings.

    Programs 0 .. SPLIT_K - 2 of a block store their partials in the block's slots and are done (a
    partial with the empty mark's bits is stored as the canonical NaN); the block's program
    SPLIT_K - 1 reads those slots until none holds the mark (`_read_slots`), sums them in split
    order with its own (the counter fix-up's sum, bit for bit), and marks them empty again after a
    CTA barrier (`_empty_slots`; without the barrier a warp that left the wait first emptied slots
    another still read: it waited forever). No fence, atomic or counter. The slots hold the mark
    between launches (`reserve_split_k_slots`). Returns (total, True) to the waiting program and
    (zeros, False) to the others."""
    last = pid_k == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        empty = tl.full([], 1, tl.int32)
        while empty > 0:
            total, empty = _read_slots(p_ptrs, split_stride, mask, acc, SPLIT_K)
        total += acc
        tl.debug_barrier()  # every warp past the wait before a slot is emptied
        _empty_slots(p_ptrs, split_stride, mask, acc, SPLIT_K)
    else:
        bits = acc.to(tl.int32, bitcast=True)
        tl.store(p_ptrs + pid_k * split_stride, tl.where(bits == _SLOT_EMPTY, 0x7FC00000, bits).to(tl.float32, bitcast=True), mask=mask)
    return total, last


def _gemv_bias(b_ptr, offs, HAS_BIAS: tl.constexpr):
    """The bias of outputs `offs` (in range) in fp32 (0.0 without one), for a GEMV's end, read BEFORE its
    main loop: read at the end, the load waits for the reduction's barriers (no load moves above a
    barrier), a memory round trip more in every program, which the small decode GEMVs feel."""
    bias = 0.0
    if HAS_BIAS:
        bias = tl.load(b_ptr + offs).to(tl.float32)
    return bias


def _store_gemv_rows(acc, y_ptr, p_ptr, c_ptr, bias, pid_m, pid_n, pid_k, M, N, stride_ym, stride_yn,
                     HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """A [BLOCK_M, BLOCK_N] GEMV block's end: split-K fix-up (partials [SPLIT_K, M, N]), bias (`_gemv_bias`, [BN]), cast, store."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    last = True
    if SPLIT_K > 1:
        counter = c_ptr + pid_m * tl.num_programs(axis=0) + pid_n
        acc, last = _split_k_total(acc, p_ptr + rows[:, None] * N + cols[None, :], M * N, mask, counter, pid_k, SPLIT_K)
    if last:
        if HAS_BIAS:
            acc += bias[None, :]
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, acc.to(y_ptr.dtype.element_ty), mask=mask)


def _store_gemv_vector(out, cols, valid, y_ptr, p_ptr, c_ptr, bias, pid_n, pid_k, N, stride_yn,
                       HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr):
    """A batch-1 GEMV block's end: split-K fix-up (partials [SPLIT_K, N]), bias (`_gemv_bias`), cast, store of the `valid` columns."""
    last = True
    if SPLIT_K > 1:
        out, last = _split_k_total(out, p_ptr + cols, N, valid, c_ptr + pid_n, pid_k, SPLIT_K)
    if last:
        if HAS_BIAS:
            out += bias
        tl.store(y_ptr + cols * stride_yn, out.to(y_ptr.dtype.element_ty), mask=valid)


# int8 -> fp32, four codes a 32-bit register (inline PTX for `tl.inline_asm_elementwise`, pack=4): the
# sign bits flipped (w + 128, unsigned), each byte moved under the exponent of 2^23 by one prmt
# (the float 2^23 + w + 128, exact), one subtract: nine instructions per four codes, against
# three per code for sign extension, integer add and float subtract: the int8 GEMV 0.3-2.5% faster at
# all nine llama shapes on the H100 (gemv-explore-int8-prmt-*.json).
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
    steps peeled) and rows past the end read the last row: 1-7% faster than the same loop with them
    at run time and rows wrapped by a modulo, at all nine llama shapes on the H100
    (gemv-explore-int8-static-*.json: 256x2048 2.05 against 2.21 us, 4096x4096 8.32 against 8.50)."""
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


def _int4_gemv_words_kernel(
    x_ptr,  # [1, K] activations (fp16 / bf16 / fp32)
    w_ptr,  # [N, K/8] int32: the uint8 [N, K/2] packing read as little-endian words, code 8j+i in bits 4i..4i+3 of word j
    s_ptr,  # [N, K/G] group scales
    z_ptr,  # [N, K/G] group zeros
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [1, N] output (x's dtype)
    p_ptr,  # [SPLIT_K, N] fp32 partials (SPLIT_K > 1)
    c_ptr,  # [cdiv(N, BLOCK_N)] int32 arrival counters, zero before and after a launch (SPLIT_K > 1)
    N, K,  # problem size (K in features)
    stride_xk,  # x stride (elements)
    stride_wn,  # w row stride (words)
    stride_sn, stride_sg,  # scales strides
    stride_zn, stride_zg,  # zeros strides
    stride_yn,  # y stride
    GROUP_SIZE: tl.constexpr,  # G, a multiple of 8 * BLOCK_W (one group per step)
    HAS_BIAS: tl.constexpr,  # add the bias
    BLOCK_N: tl.constexpr,  # output channels per program
    BLOCK_W: tl.constexpr,  # 32-bit words (8 codes each) per row per step
    SPLIT_K: tl.constexpr,  # programs sharing one output block along K; the last to finish sums them
    PREFETCH: tl.constexpr,  # load step k+1's words before step k's arithmetic (bytes in flight)
    STAGES: tl.constexpr = 1,  # > 1: Triton streams the loop's loads through shared memory (cp.async), STAGES - 1 steps ahead
):
    """Batch-1 int4 GEMV at about five instructions per code (the byte kernel takes about seven).

    Each step loads [BLOCK_N, BLOCK_W] words; code i of every word becomes an fp32 with ONE lop3:
    (word & (0xF << 4i)) | 0x4B000000 is the float 2^23 + q 16^i exactly (nibbles 5..7 are first
    shifted down 12 bits, one shift for three codes), and one subtract of 2^23 + 8 16^i leaves
    (q - 8) 16^i. The matching x element is pre-scaled by 16^-i (exact: a power of two, once per
    x element, shared by every row), so one FMA adds x (q - 8). x is read as [BLOCK_W, 8] (its K
    order: word j, code i is feature 8j + i) and split into its 8 columns in registers.
    """
    pid_n = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_w = tl.arange(0, BLOCK_W)
    w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + (pid_k * BLOCK_W + offs_w)[None, :]  # [BN, BW]
    x_ptrs = x_ptr + ((pid_k * BLOCK_W + offs_w)[:, None] * 8 + tl.arange(0, 8)[None, :]) * stride_xk  # [BW, 8]
    acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.float32)  # per-word sums, scaled per group
    zero_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)  # zero * sum(x) per group
    bias = _gemv_bias(b_ptr, offs_n, HAS_BIAS)
    step = SPLIT_K * BLOCK_W * 8  # features between this program's steps
    if PREFETCH:  # step 0's words, requested before the loop
        w_next = tl.load(w_ptrs)
    for k0 in tl.range(pid_k * BLOCK_W * 8, K, step, num_stages=STAGES):
        if PREFETCH:  # this step's words arrived during the last step's arithmetic; request the next step's now
            w = w_next.to(tl.uint32, bitcast=True)
            w_next = tl.load(w_ptrs + SPLIT_K * BLOCK_W, mask=(offs_w < (K - k0 - step) // 8)[None, :], other=0)
        else:
            w = tl.load(w_ptrs).to(tl.uint32, bitcast=True)  # [BN, BW]
        x = tl.load(x_ptrs).to(tl.float32)  # [BW, 8]
        even, odd = tl.split(x.reshape(BLOCK_W, 4, 2))  # codes 0 2 4 6 / 1 3 5 7
        x04, x26 = tl.split(even.reshape(BLOCK_W, 2, 2))
        x0, x4 = tl.split(x04)
        x2, x6 = tl.split(x26)
        x15, x37 = tl.split(odd.reshape(BLOCK_W, 2, 2))
        x1, x5 = tl.split(x15)
        x3, x7 = tl.split(x37)
        hi = w >> 12  # codes 5, 6, 7 at bits 8..19
        part = (((w & 0xF) | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0) * x0[None, :]
        part += (((w & 0xF0) | 0x4B000000).to(tl.float32, bitcast=True) - 8388736.0) * (x1 * 0.0625)[None, :]
        part += (((w & 0xF00) | 0x4B000000).to(tl.float32, bitcast=True) - 8390656.0) * (x2 * 0.00390625)[None, :]
        part += (((w & 0xF000) | 0x4B000000).to(tl.float32, bitcast=True) - 8421376.0) * (x3 * 0.000244140625)[None, :]
        part += (((w & 0xF0000) | 0x4B000000).to(tl.float32, bitcast=True) - 8912896.0) * (x4 * 0.0000152587890625)[None, :]
        part += (((hi & 0xF00) | 0x4B000000).to(tl.float32, bitcast=True) - 8390656.0) * (x5 * 0.00390625)[None, :]
        part += (((hi & 0xF000) | 0x4B000000).to(tl.float32, bitcast=True) - 8421376.0) * (x6 * 0.000244140625)[None, :]
        part += (((hi & 0xF0000) | 0x4B000000).to(tl.float32, bitcast=True) - 8912896.0) * (x7 * 0.0000152587890625)[None, :]
        g = k0 // GROUP_SIZE  # the step lies in one group: its scale and zero factor out
        scale = tl.load(s_ptr + offs_n * stride_sn + g * stride_sg).to(tl.float32)  # [BN]
        zero = tl.load(z_ptr + offs_n * stride_zn + g * stride_zg).to(tl.float32)
        acc += part * scale[:, None]
        zero_acc += zero * tl.sum(tl.sum(x, axis=1), axis=0)
        w_ptrs += SPLIT_K * BLOCK_W
        x_ptrs += SPLIT_K * BLOCK_W * 8 * stride_xk
    out = tl.sum(acc, axis=1) + zero_acc  # [BN]
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    _store_gemv_vector(out, cols, cols < N, y_ptr, p_ptr, c_ptr, bias, pid_n, pid_k, N, stride_yn, HAS_BIAS, SPLIT_K)


def _int4_rows_side_loads(x_ptr, s_ptr, z_ptr, k0, offs_n, offs_w, stride_xk, stride_sn, stride_sg, stride_zn, stride_zg, ok,
                          GROUP_SIZE: tl.constexpr, BLOCK_W: tl.constexpr, MASKED: tl.constexpr):
    """The row kernel's reads for the step at feature k0 besides the words: x at features 8j + i
    ([1, BW] each, i = 0..7, in the words' layout) and the step's scales and zeros ([BN] for a group
    a step, [BN, 8 BW / G] for several), as stored. MASKED: all predicated on `ok` ([1, 1]: one
    value; what a false one leaves is never read), else `ok` is None."""
    x_ptrs = x_ptr + (k0 + offs_w[None, :] * 8) * stride_xk  # [1, BW]: feature 8j of word j
    g = k0 // GROUP_SIZE  # the step's (first) group
    s_ok = ok
    if 8 * BLOCK_W <= GROUP_SIZE:
        s_ptrs = s_ptr + offs_n * stride_sn + g * stride_sg  # [BN]
        z_ptrs = z_ptr + offs_n * stride_zn + g * stride_zg
        if MASKED:
            s_ok = tl.reshape(ok, (1,))
    else:
        offs_g = g + tl.arange(0, 8 * BLOCK_W // GROUP_SIZE)
        s_ptrs = s_ptr + offs_n[:, None] * stride_sn + offs_g[None, :] * stride_sg  # [BN, groups]
        z_ptrs = z_ptr + offs_n[:, None] * stride_zn + offs_g[None, :] * stride_zg
    return (tl.load(x_ptrs, mask=ok), tl.load(x_ptrs + stride_xk, mask=ok), tl.load(x_ptrs + 2 * stride_xk, mask=ok),
            tl.load(x_ptrs + 3 * stride_xk, mask=ok), tl.load(x_ptrs + 4 * stride_xk, mask=ok), tl.load(x_ptrs + 5 * stride_xk, mask=ok),
            tl.load(x_ptrs + 6 * stride_xk, mask=ok), tl.load(x_ptrs + 7 * stride_xk, mask=ok), tl.load(s_ptrs, mask=s_ok), tl.load(z_ptrs, mask=s_ok))


def _int4_gemv_rows_kernel(
    x_ptr,  # [1, K] activations (fp16 / bf16 / fp32)
    w_ptr,  # [N, K/8] int32 words, as for the word kernel; rows STRIDE_W words apart
    s_ptr,  # [N, K/G] group scales
    z_ptr,  # [N, K/G] group zeros
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [1, N] output (x's dtype)
    p_ptr,  # [SPLIT_K, N] fp32 partials (SPLIT_K > 1)
    c_ptr,  # [cdiv(N, BLOCK_N)] int32 arrival counters, zero before and after a launch (SPLIT_K > 1)
    N,  # output channels, N >= BLOCK_N (at run time: the 1.0f below is made from it)
    K: tl.constexpr,  # features; K and the strides compiled in, as the int8 GEMV's shape (the loop bounds known, single steps peeled)
    stride_xk: tl.constexpr,  # x stride (elements)
    stride_sn: tl.constexpr, stride_sg: tl.constexpr,  # scales strides
    stride_zn: tl.constexpr, stride_zg: tl.constexpr,  # zeros strides
    stride_yn: tl.constexpr,  # y stride
    STRIDE_W: tl.constexpr,  # w row stride (words): a constant, so every row's load is one address plus an immediate
    GROUP_SIZE: tl.constexpr,  # G: a multiple of 8 * BLOCK_W (a group a step) or a divisor of it (8 * BLOCK_W / G groups a step)
    HAS_BIAS: tl.constexpr,  # add the bias
    BLOCK_N: tl.constexpr,  # output channels per program
    BLOCK_W: tl.constexpr,  # 32-bit words (8 codes each) per row per step, two per lane along the row
    SPLIT_K: tl.constexpr,  # programs sharing one output block along K; the last to finish sums them
    PRECISE: tl.constexpr,  # fp32 activations: four shifts a word for fp32-grade sums (see below)
    VEC: tl.constexpr,  # words a lane loads from each row at once (2: 8-byte loads, 4: 16-byte loads)
    PREFETCH: tl.constexpr,  # 1: load step k+1's words before step k's arithmetic; 2: its x, scales and zeros as well
    STAGES: tl.constexpr = 1,  # > 1: Triton streams the loop's loads through shared memory (cp.async), STAGES - 1 steps ahead
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch, the next kernel let in at point PDL (`_pdl_trigger`)
):
    """Batch-1 int4 GEMV at about three instructions a code: one lop3 and one FMA, little else.

    Layout: a thread holds VEC words of each of several rows (BLOCK_W / VEC lanes along the words,
    the rest of the CTA along the rows; a contiguity hint of VEC gives that layout under Triton 3.6
    and 3.9 alike), so the x values of its words, loaded straight into that layout, serve all its
    rows (benchmarks/sass_loop.py counts the compiled loop). Code i sits at bit b_i of w << 11, w or w >> 9 (b = 11, 15, 19,
    12, 16, 11, 15, 19: two shifts a word), and (v & (0xF << b)) | 1.0f is the float 1 + q 2^(b-23)
    exactly; times y = x 2^(23-b) (exact, shared by all rows) it is y + q x. The y terms and the
    zero point, c = sum(y) + 8 sum(x) per word, start each word's FMA chain at -c, leaving
    sum((q - 8) x) with no per-code subtract. The chain rounds at y's scale, 2^(23-b) |x|: with
    b >= 11 the sum's relative error is about 5e-5 (a tenth of fp16's output rounding); fp32
    activations (PRECISE) place every code at bit 15 or 19 with four shifts (one a funnel
    rotation) for about 3e-6. The 1.0f lives in a register ptxas cannot fold (N >> 31 | 1.0f):
    with two immediates each lop3 would cost a move as well.
    """
    pid_n = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    first = tl.minimum(pid_n * BLOCK_N, N - BLOCK_N)  # the last block overlaps its neighbour instead of wrapping
    rows = tl.arange(0, BLOCK_N)
    offs_n = first + rows
    offs_w = tl.max_contiguous(tl.arange(0, BLOCK_W), VEC)  # VEC words a lane along the row (x loads follow, both Tritons)
    w_ptrs = (w_ptr + first * STRIDE_W + pid_k * BLOCK_W) + (rows[:, None] * STRIDE_W + offs_w[None, :])  # [BN, BW]
    acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.float32)  # per-word sums, scaled per group
    zero_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)  # zero * sum(x) per group
    GROUPS: tl.constexpr = 8 * BLOCK_W // GROUP_SIZE if 8 * BLOCK_W > GROUP_SIZE else 1
    acc_g = tl.zeros((BLOCK_N, GROUPS), dtype=tl.float32)  # several groups a step: sum (q - 8) x s + z sum x per group
    magic = (N >> 31) | 0x3F800000  # 1.0f (N >> 31 is 0)
    bias = _gemv_bias(b_ptr, offs_n, HAS_BIAS)
    step = SPLIT_K * BLOCK_W * 8  # features between this program's steps
    first_k = pid_k * BLOCK_W * 8
    if PREFETCH:
        w_next = tl.load(w_ptrs)
    _pdl_wait(PDL)  # under PDL, step 0's words (PREFETCH) are on their way while the previous kernel ends; x next
    if PREFETCH == 2:  # step 0's x, scales and zeros too
        xn0, xn1, xn2, xn3, xn4, xn5, xn6, xn7, s_next, z_next = _int4_rows_side_loads(
            x_ptr, s_ptr, z_ptr, first_k, offs_n, offs_w, stride_xk, stride_sn, stride_sg, stride_zn, stride_zg, None, GROUP_SIZE, BLOCK_W, False)
    for k0 in tl.range(first_k, K, step, num_stages=STAGES):
        if PREFETCH == 2:  # everything this step reads arrived during the last step; request all of the next step's now
            w = w_next.to(tl.uint32, bitcast=True)
            x0, x1, x2, x3, x4, x5, x6, x7, scale, zero = xn0, xn1, xn2, xn3, xn4, xn5, xn6, xn7, s_next, z_next
            more = tl.full((1, 1), 0, tl.int32) + (k0 + step) < K  # one predicate for every load of the next step (whole steps: K % BLOCK_K == 0)
            w_next = tl.load(w_ptrs + SPLIT_K * BLOCK_W, mask=more, other=0)
            xn0, xn1, xn2, xn3, xn4, xn5, xn6, xn7, s_next, z_next = _int4_rows_side_loads(
                x_ptr, s_ptr, z_ptr, k0 + step, offs_n, offs_w, stride_xk, stride_sn, stride_sg, stride_zn, stride_zg, more, GROUP_SIZE, BLOCK_W, True)
        else:
            if PREFETCH:  # this step's words arrived during the last step's arithmetic; request the next step's now
                w = w_next.to(tl.uint32, bitcast=True)
                w_next = tl.load(w_ptrs + SPLIT_K * BLOCK_W, mask=(offs_w < (K - k0 - step) // 8)[None, :], other=0)
            else:
                w = tl.load(w_ptrs).to(tl.uint32, bitcast=True)  # [BN, BW]
            x0, x1, x2, x3, x4, x5, x6, x7, scale, zero = _int4_rows_side_loads(
                x_ptr, s_ptr, z_ptr, k0, offs_n, offs_w, stride_xk, stride_sn, stride_sg, stride_zn, stride_zg, None, GROUP_SIZE, BLOCK_W, False)
        x0 = x0.to(tl.float32)
        x1 = x1.to(tl.float32)
        x2 = x2.to(tl.float32)
        x3 = x3.to(tl.float32)
        x4 = x4.to(tl.float32)
        x5 = x5.to(tl.float32)
        x6 = x6.to(tl.float32)
        x7 = x7.to(tl.float32)
        scale = scale.to(tl.float32)  # [BN] (a group a step) or [BN, groups]
        zero = zero.to(tl.float32)
        x_sum = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
        if PRECISE:  # b = 19, 15, 19, 15, 19, 15, 19, 15: y within 2^8 |x|
            y0 = x0 * 16.0  # 2^(23 - b_i)
            y1 = x1 * 256.0
            y2 = x2 * 16.0
            y3 = x3 * 256.0
            y4 = x4 * 16.0
            y5 = x5 * 256.0
            y6 = x6 * 16.0
            y7 = x7 * 256.0
            c = ((y0 + y1) + (y2 + y3)) + ((y4 + y5) + (y6 + y7)) + 8.0 * x_sum
            rot = (w << 19) | (w >> 13)  # one funnel shift: code 7 at bit 15, code 0 at 19
            a = w << 11  # codes 1, 2 at bits 15, 19
            b = w << 3  # codes 3, 4
            d = w >> 5  # codes 5, 6
            part = ((rot & 0x780000) | magic).to(tl.float32, bitcast=True) * y0 - c
            part += ((a & 0x78000) | magic).to(tl.float32, bitcast=True) * y1
            part += ((a & 0x780000) | magic).to(tl.float32, bitcast=True) * y2
            part += ((b & 0x78000) | magic).to(tl.float32, bitcast=True) * y3
            part += ((b & 0x780000) | magic).to(tl.float32, bitcast=True) * y4
            part += ((d & 0x78000) | magic).to(tl.float32, bitcast=True) * y5
            part += ((d & 0x780000) | magic).to(tl.float32, bitcast=True) * y6
            part += ((rot & 0x78000) | magic).to(tl.float32, bitcast=True) * y7
        else:  # b = 11, 15, 19, 12, 16, 11, 15, 19: two shifts a word, y within 2^12 |x|
            y0 = x0 * 4096.0
            y1 = x1 * 256.0
            y2 = x2 * 16.0
            y3 = x3 * 2048.0
            y4 = x4 * 128.0
            y5 = x5 * 4096.0
            y6 = x6 * 256.0
            y7 = x7 * 16.0
            c = ((y0 + y1) + (y2 + y3)) + ((y4 + y5) + (y6 + y7)) + 8.0 * x_sum
            lo = w << 11  # codes 0, 1, 2 at bits 11, 15, 19
            hi = w >> 9  # codes 5, 6, 7 at bits 11, 15, 19 (codes 3, 4 stay at 12, 16)
            part = ((lo & 0x7800) | magic).to(tl.float32, bitcast=True) * y0 - c
            part += ((lo & 0x78000) | magic).to(tl.float32, bitcast=True) * y1
            part += ((lo & 0x780000) | magic).to(tl.float32, bitcast=True) * y2
            part += ((w & 0xF000) | magic).to(tl.float32, bitcast=True) * y3
            part += ((w & 0xF0000) | magic).to(tl.float32, bitcast=True) * y4
            part += ((hi & 0x7800) | magic).to(tl.float32, bitcast=True) * y5
            part += ((hi & 0x78000) | magic).to(tl.float32, bitcast=True) * y6
            part += ((hi & 0x780000) | magic).to(tl.float32, bitcast=True) * y7
        if 8 * BLOCK_W <= GROUP_SIZE:  # the step lies in one group
            acc += part * scale[:, None]
            zero_acc += zero * tl.sum(x_sum, axis=1)  # [BN] * [1]: a sum across one row's lanes, in the words' layout
        else:  # 8 BW / G groups of G / 8 words side by side: each group's sums, then its scale and zero
            part_g = tl.sum(tl.reshape(part, (BLOCK_N, GROUPS, GROUP_SIZE // 8)), axis=2)  # [BN, groups]
            x_g = tl.sum(tl.reshape(x_sum, (x_sum.shape[0], GROUPS, GROUP_SIZE // 8)), axis=2)
            acc_g += part_g * scale + zero * x_g
        w_ptrs += SPLIT_K * BLOCK_W
    _pdl_trigger(PDL, 3)
    out = tl.sum(acc, axis=1) + zero_acc + tl.sum(acc_g, axis=1)  # [BN]
    valid = offs_n >= pid_n * BLOCK_N  # the last block leaves its neighbour's rows alone
    _store_gemv_vector(out, offs_n, valid, y_ptr, p_ptr, c_ptr, bias, pid_n, pid_k, N, stride_yn, HAS_BIAS, SPLIT_K)


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


# The tensor-core GEMV's step for one 16-row tile: four m16n8k16 MMAs over 64 features, for
# `tl.inline_asm_elementwise` with pack=4 on [..., 128] tensors, element 4 lane + c: the lane <->
# fragment mapping holds only in the layout of the words' 16-byte loads (four elements a thread,
# 32 lanes along the last dim), which `test_int4_tc_asm_layout` checks in the compiled IR.
# $0..$3: the C fragment (fp32, from zero); $4..$7 the lane's four words (one per MMA, A-fragment
# order: `shuffle_int4_for_tc`); $8..$15 the lane's x pairs 8t..8t + 7 (batch row g = lane / 4), MMA
# j's B fragment (features 2t, 2t + 1 and 2t + 8, 2t + 9) pairs 8t + 2j and 8t + 2j + 1: a register
# pair as loaded, so none is moved into place. Code pairs (r, r + 4) =
# (w >> 4r) & 0x000F000F | MAGIC are MAGIC + q exactly (bf16 128 + q, fp16 1024 + q): the MMA sums
# x (MAGIC + q) in fp32, and the group's scale and zero apply to the fp32 sums with MAGIC + 8 times
# the x sums taken off (`_TC_HALVES`), so the weight is never rounded. Eight instructions per eight
# codes, the MMA included (twelve with a packed FMA to q - 8 first, as before: 15-30% fewer
# instructions a step, 2.4% faster at 128256x4096 and no change at the smaller llama-8b shapes on
# the H100, ab-int4-tc-raw-pairs-*.json).
_INT4_TC_TILE = """
{
.reg .b32 a0, a1, a2, a3, t1, t2, t3;
mov.b32 $0, 0;
mov.b32 $1, 0;
mov.b32 $2, 0;
mov.b32 $3, 0;
""" + "".join(f"""
shr.u32 t1, ${4 + i}, 4;
shr.u32 t2, ${4 + i}, 8;
shr.u32 t3, ${4 + i}, 12;
lop3.b32 a0, ${4 + i}, 0x000F000F, MAGIC, 0xEA;
lop3.b32 a1, t1, 0x000F000F, MAGIC, 0xEA;
lop3.b32 a2, t2, 0x000F000F, MAGIC, 0xEA;
lop3.b32 a3, t3, 0x000F000F, MAGIC, 0xEA;
mma.sync.aligned.m16n8k16.row.col.f32.MMA.MMA.f32 {{$0, $1, $2, $3}}, {{a0, a1, a2, a3}}, {{${8 + 2 * i}, ${9 + 2 * i}}}, {{$0, $1, $2, $3}};
""" for i in range(4)) + "}\n"
# The x sums the zero point needs, in the C layout: the same MMAs with A = ones (C[row][n] = the sum
# of x[n] over the 64 features for every row); $4..$11 the x pairs (MMA j: $4 + 2j, $5 + 2j). Once a chunk a warp.
_INT4_TC_XSUM = """
{
.reg .b32 one;
mov.b32 one, ONE;
mov.b32 $0, 0;
mov.b32 $1, 0;
mov.b32 $2, 0;
mov.b32 $3, 0;
""" + "".join(f"""mma.sync.aligned.m16n8k16.row.col.f32.MMA.MMA.f32 {{$0, $1, $2, $3}}, {{one, one, one, one}}, {{${4 + 2 * i}, ${5 + 2 * i}}}, {{$0, $1, $2, $3}};
""" for i in range(4)) + "}\n"


# per 16-bit activation dtype: MAGIC (128 bf16 / 1024 fp16, twice), ONE (1.0 twice), the MMA's type,
# and MAGIC + 8: what the MMA operands (MAGIC + q) hold over q - 8, taken off through the x sums
_TC_HALVES = {"bf16": ("0x43004300", "0x3F803F80", "bf16", 136.0), "fp16": ("0x64006400", "0x3C003C00", "f16", 1032.0)}


def _tc_asm(template: str, half: str) -> str:
    """`template` for 16-bit activations `half` ("bf16" or "fp16")."""
    magic, one, mma, _ = _TC_HALVES[half]
    return template.replace("MAGIC", magic).replace("ONE", one).replace("MMA", mma)


INT4_TC_BF16, INT4_TC_FP16 = _tc_asm(_INT4_TC_TILE, "bf16"), _tc_asm(_INT4_TC_TILE, "fp16")
INT4_TC_XSUM_BF16, INT4_TC_XSUM_FP16 = _tc_asm(_INT4_TC_XSUM, "bf16"), _tc_asm(_INT4_TC_XSUM, "fp16")


def tc_constants(half: str) -> dict[str, Any]:
    """The tensor-core GEMV's dtype constexprs for 16-bit activations `half` ("bf16" or "fp16"): its
    PTX (ASM, XSUM_ASM), x's dtype (HALF) and Q_BIAS, what the PTX's MMA operands hold over q - 8."""
    bf16 = half == "bf16"
    return {"ASM": INT4_TC_BF16 if bf16 else INT4_TC_FP16, "XSUM_ASM": INT4_TC_XSUM_BF16 if bf16 else INT4_TC_XSUM_FP16,
            "HALF": tl.bfloat16 if bf16 else tl.float16, "Q_BIAS": _TC_HALVES[half][3]}


def _tc_x_matrix(b0, b1, HALF: tl.constexpr):
    """The x pairs b0, b1 [1, 128] (element 4 lane + c: pairs 8t + c, 8t + 4 + c) as the MMAs' B, the matrix
    x [8 batch rows, 64 features] (the PTX ISA's layout): MMA j's register e is pair 8t + 2j + e."""
    xb = tl.reshape(tl.join(b0, b1), (8, 4, 2, 2, 2))  # [g = n, t, c // 2, e = c % 2, b1]: x pairs
    xb = tl.reshape(tl.permute(xb, (0, 1, 4, 2, 3)), (8, 4, 4, 2))  # [g, t, j = 2 b1 + c // 2, e]
    x_lo = (xb & 0xFFFF).to(tl.int16).to(HALF, bitcast=True).to(tl.float32)
    x_hi = ((xb >> 16) & 0xFFFF).to(tl.int16).to(HALF, bitcast=True).to(tl.float32)
    return tl.reshape(tl.permute(tl.join(x_lo, x_hi), (0, 2, 3, 1, 4)), (8, 64))  # [n, j e t p]


def _int4_tc_emulated(words, b0, b1, HALF: tl.constexpr, TILES: tl.constexpr, Q_BIAS: tl.constexpr):
    """`_INT4_TC_TILE`'s and `_INT4_TC_XSUM`'s C fragments in tensor arithmetic (the interpreter,
    where inline PTX cannot run): A [tile, 16 rows, 64 features] of q - 8 from the words, B from
    the x pairs, C scattered back to [tile, 4 lane + c] (row 8 (c // 2) + g, column 2t + c % 2) as
    the m16n8k16 layouts say; and the x sums [1, 128] (the sum of x[2t + c % 2]). A holds q - 8 + Q_BIAS, as the PTX's operands."""
    lane_j = tl.reshape(words, (TILES, 8, 4, 4))  # [tile, g, t, j]
    vals = []
    for i in tl.static_range(8):  # nibble i = 4p + 2e + h: row g + 8h, feature 16j + 8e + 2t + p
        vals.append(((lane_j >> (4 * i)) & 0xF).to(tl.float32) + (Q_BIAS - 8.0))
    v = tl.join(tl.join(tl.join(vals[0], vals[1]), tl.join(vals[2], vals[3])), tl.join(tl.join(vals[4], vals[5]), tl.join(vals[6], vals[7])))
    a = tl.reshape(tl.permute(v, (0, 4, 1, 3, 5, 2, 6)), (TILES, 16, 64))  # [tile, g t j h e p] -> [tile, h g, j e t p]
    bmat = _tc_x_matrix(b0, b1, HALF)
    y = tl.sum(a[:, :, None, :] * bmat[None, None, :, :], axis=3)  # [tile, 16 rows, 8 columns]
    c = tl.permute(tl.reshape(y, (TILES, 2, 8, 4, 2)), (0, 2, 3, 1, 4))  # [tile, g, t, h, par]
    sums = tl.reshape(tl.sum(bmat, axis=1), (1, 1, 4, 1, 2))  # [., ., t, ., par]
    return tl.reshape(c, (TILES, 128)), tl.reshape(tl.broadcast_to(sums, (1, 8, 4, 2, 2)), (1, 128))


def _tc_load(ptrs, FLIP: tl.constexpr, EVICT: tl.constexpr):
    """A load of a [WARPS, ., ., lanes] tensor of the tensor-core GEMV with its warps on dim 0: FLIP (Triton
    3.7+, which breaks ties between equally contiguous dims from the last one: `tc_flip`) loads it with
    dims 0 and 2 swapped and swaps them back, so the warps never land on dim 2 (the chunks, summed in registers)."""
    if FLIP:
        return tl.permute(tl.load(tl.permute(ptrs, (2, 1, 0, 3)), eviction_policy=EVICT), (2, 1, 0, 3))
    return tl.load(ptrs, eviction_policy=EVICT)


def _tc_weights(w_ptrs, sz_ptrs, k, GROUP_SIZE: tl.constexpr, FLIP: tl.constexpr = False):
    """The tensor-core GEMV's weight reads for the step at feature k (< K): its words, read once (evicted
    first), and (s, z) pairs, read again by other steps of the group (evicted last). Written by nobody
    during a model's run: under PDL they may be read before the wait."""
    words = _tc_load(w_ptrs + (k // 64) * 128, FLIP, "evict_first")  # k // 64 times 128: a multiple the compiler sees (16-byte loads)
    sz = _tc_load(sz_ptrs + (k // GROUP_SIZE) * 16, FLIP, "evict_last")
    return words, sz


def _tc_x(x_ptrs, k, FLIP: tl.constexpr = False):
    """x's B fragments for the step at feature k (read by every program: evicted last, 0.2-8 us less on the H100)."""
    chunk = k // 64
    return _tc_load(x_ptrs + chunk * 32, FLIP, "evict_last"), _tc_load(x_ptrs + (chunk * 32 + 4), FLIP, "evict_last")


def _tc_step(acc, words, b0, b1, sz, ASM: tl.constexpr, XSUM_ASM: tl.constexpr, HALF: tl.constexpr, TPW: tl.constexpr, WARPS: tl.constexpr,
             CHUNKS: tl.constexpr, SPAN: tl.constexpr, Q_BIAS: tl.constexpr):
    """acc [WARPS, TPW, 128] (TPW tiles a warp) plus one step of the tensor-core GEMV: sum (q - 8) x s + z sum x
    over each group of the step's CHUNKS chunks (SPAN groups), in fp32, from the MMAs' sums of
    (q - 8 + Q_BIAS) x: s times those plus (z - Q_BIAS s) sum x."""
    s_half = (sz & 0xFFFF).to(tl.int16).to(HALF, bitcast=True).to(tl.float32)  # [WARPS, TPW, SPAN, 64]: rows 2g, 2g + 1
    z_half = (sz >> 16).to(tl.int16).to(HALF, bitcast=True).to(tl.float32)
    scale = tl.reshape(tl.join(s_half, s_half), (WARPS, TPW, SPAN, 128))  # C element c: row 2g + c // 2
    zero = tl.reshape(tl.join(z_half, z_half), (WARPS, TPW, SPAN, 128)) - Q_BIAS * scale
    if ASM == "":
        ch = tl.arange(0, CHUNKS)[None, None, :, None]
        span = tl.arange(0, SPAN)[None, None, :, None]
        warp = tl.arange(0, WARPS)[:, None, None]
        for w in tl.static_range(WARPS):  # each warp's words and its own x (under WARP_K the warps' x differ)
            mine = warp[:, :, :, None] == w
            for i in tl.static_range(CHUNKS):  # chunk i's words and x, and its group's scale and zero, picked out by masked sums
                words_i = tl.sum(tl.sum(tl.where(mine & (ch == i), words, 0), axis=2), axis=0)  # [TPW, 128]
                b0_i = tl.sum(tl.sum(tl.where(mine & (ch == i), b0, 0), axis=2), axis=0)  # [1, 128]
                b1_i = tl.sum(tl.sum(tl.where(mine & (ch == i), b1, 0), axis=2), axis=0)
                own_group = span == i // (CHUNKS // SPAN)
                part, x_sum = _int4_tc_emulated(words_i, b0_i, b1_i, HALF, TPW, Q_BIAS)
                grown = part[None, :, :] * tl.sum(tl.where(own_group, scale, 0.0), axis=2) + tl.sum(tl.where(own_group, zero, 0.0), axis=2) * x_sum[None, :, :]
                acc += tl.where(warp == w, grown, 0.0)
    else:
        parts = tl.inline_asm_elementwise(ASM, "=f,=f,=f,=f,r,r,r,r,r,r,r,r,r,r,r,r", [words, b0, b1], dtype=tl.float32, is_pure=True, pack=4)
        x_sums = tl.inline_asm_elementwise(XSUM_ASM, "=f,=f,=f,=f,r,r,r,r,r,r,r,r", [b0, b1], dtype=tl.float32, is_pure=True, pack=4)
        part = tl.sum(tl.reshape(parts, (WARPS, TPW, SPAN, CHUNKS // SPAN, 128)), axis=3)  # the chunks of each group
        x_sum = tl.sum(tl.reshape(x_sums, (WARPS, 1, SPAN, CHUNKS // SPAN, 128)), axis=3)
        acc += tl.sum(part * scale + zero * x_sum, axis=2)
    return acc


def _int4_gemv_tc_kernel(
    x_ptr,  # [M, K/2] int32: the 16-bit activations read as pairs
    w_ptr,  # [cdiv(N, 16), K/64, 32, 4] int32 words in MMA A-fragment order (`shuffle_int4_for_tc`)
    sz_ptr,  # [cdiv(N, 16), K/G, 16] int32: each row's scale and zero in x's dtype (`_int4_tc_scales`)
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [M, N] output (x's dtype)
    p_ptr,  # [SPLIT_K, M, N] fp32 partials (SPLIT_K > 1)
    c_ptr,  # [cdiv(cdiv(N, 16), TILES)] int32 arrival counters, zero between launches (SPLIT_K > 1)
    M,  # batch rows, M <= 8
    N: tl.constexpr, K: tl.constexpr,  # output channels, features: compiled in, as the int8 GEMV's shape
    stride_xm,  # x row stride (pairs)
    stride_ym, stride_yn,  # y strides
    GROUP_SIZE: tl.constexpr,  # G, a multiple of 64
    HAS_BIAS: tl.constexpr,  # add the bias
    ASM: tl.constexpr,  # INT4_TC_BF16 / INT4_TC_FP16, or "" (the interpreter: `_int4_tc_emulated`)
    XSUM_ASM: tl.constexpr,  # INT4_TC_XSUM_BF16 / INT4_TC_XSUM_FP16 (unused under the interpreter)
    HALF: tl.constexpr,  # x's 16-bit dtype
    Q_BIAS: tl.constexpr,  # the MMAs' operands are q - 8 + Q_BIAS (`tc_constants`: what ASM makes of the codes; the emulation follows it)
    TILES: tl.constexpr,  # 16-row tiles per program, a multiple of WARPS
    WARPS: tl.constexpr,  # num_warps
    CHUNKS: tl.constexpr,  # 64-feature chunks a step (within a group, or whole groups)
    PREFETCH: tl.constexpr,  # load step k+1 (words, x, scales, zeros) before step k's arithmetic
    SPLIT_K: tl.constexpr,  # programs sharing one output block along K
    STAGES: tl.constexpr = 1,  # > 1: Triton streams the loop's loads through shared memory (cp.async), STAGES - 1 steps ahead
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch, the next kernel let in at point PDL (`_pdl_trigger`)
    X_NOW: tl.constexpr = False,  # with PREFETCH: x read in the step that uses it instead of a step ahead
    FLIP: tl.constexpr = False,  # Triton breaks ties between equally contiguous dims from the last one (3.7+, `tc_flip`): loads flipped (`_tc_load`)
    FIXUP_WAIT: tl.constexpr = False,  # SPLIT_K > 1, launched cooperatively: split SPLIT_K - 1 waits for its siblings' partials (`_split_k_total_waiting`; p_ptr: the slots)
    WARP_K: tl.constexpr = False,  # the warps split each step's features (CHUNKS chunks each) over all TILES tiles, their sums met in shared memory at the end
):
    """Batch 1..8 int4 GEMV on tensor cores: the weight, pre-shuffled so that each lane's 16-byte
    load is its four A fragments, dequantised in registers straight into MMA operands (no shared
    memory, no layout conversion), x padded to the MMA's 8 columns. A step = 64 features of every
    tile: the MMAs give y^T [16, 8] of sum x (q - 8) per tile in fp32, scaled by the rows' group
    scales and offset by zero * sum x (those sums by MMAs with A = ones) into an fp32 accumulator
    [TILES, 128] in the C fragments' layout. With WARP_K the warps split the program's features
    instead of its tiles (a step = 64 CHUNKS features a warp): their sums meet through shared memory
    once, after the loop, where split-K programs meet through global memory; with one step a
    program (BLOCK_K = K / SPLIT_K) and PREFETCH, all its words are read before the PDL wait."""
    pid_n = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    n_tiles = tl.cdiv(N, 16)
    # [WARPS, TPW, CHUNKS, 128]: warp w holds TPW tiles (w TPW + r; every tile under WARP_K), a lane its
    # four words of each of the warp's chunks of the step (element 4 lane + c); x's B fragments [WARPS, 1,
    # CHUNKS, 128] have as many elements a thread as the words, so every asm operand loads in the words'
    # 16-byte layout and none is converted. The fp32 sums and the C fragments: [WARPS, TPW, 128].
    TPW: tl.constexpr = TILES if WARP_K else TILES // WARPS
    warp = tl.arange(0, WARPS)[:, None, None]
    if WARP_K:  # warp w: every tile, features 64 w CHUNKS .. 64 (w + 1) CHUNKS - 1 of each step; the sums' tiles [1, TILES, 1]
        own_out = pid_n * TILES + tl.arange(0, TILES)[None, :, None]
        own = own_out + 0 * warp
        warp_chunk = warp * CHUNKS
    else:
        own = pid_n * TILES + (warp * TPW + tl.arange(0, TPW)[None, :, None])
        own_out = own
        warp_chunk = 0 * warp
    tiles = tl.minimum(own, n_tiles - 1)  # the last program repeats a tile instead of reading past the end
    e = tl.arange(0, 128)[None, None, :]
    g = e // 16  # the MMA's group id (lane / 4): A/C rows g and g + 8, B column g
    t = (e // 4) % 4  # thread in group: MMA features 2t, 2t + 1 (+ 8), C columns 2t, 2t + 1
    c = e % 4  # the lane's word c (MMA c of a chunk) / C element c
    ch = tl.arange(0, CHUNKS)[None, None, :, None]
    chunks = K // 64
    w_ptrs = w_ptr + (tiles * (chunks * 128) + warp_chunk * 128 + e)[:, :, None, :] + ch * 128  # [WARPS, TPW, CHUNKS, 128]
    # [WARPS, 1, CHUNKS, 128]: x pairs 8t + c (b0), 8t + 4 + c (b1) of batch row g; B columns past M read row g % M
    # (valid addresses, no masks): they only make C columns that are never stored
    x_ptrs = (x_ptr + (g % M) * stride_xm + (8 * t + c) + warp_chunk * 32)[:, :, None, :] + ch * 32
    rows = 16 * tl.minimum(own_out, n_tiles - 1) + 2 * g + c // 2  # C element c: MMA row g + 8 (c // 2) = weight row 2g + c // 2 of the tile, column 2t + c % 2
    # a warp's step spans SPAN groups (64 CHUNKS <= G: one): their scales and zeros [WARPS, TPW, SPAN, 64]; under WARP_K warp w's
    # features start 64 w CHUNKS past the step's, a whole number of groups past its group or within it (the step divides G or is a multiple of it)
    SPAN: tl.constexpr = 1 if 64 * CHUNKS <= GROUP_SIZE else 64 * CHUNKS // GROUP_SIZE
    e64 = tl.arange(0, 64)[None, None, None, :]  # a lane's two rows 2g, 2g + 1 (element 2 lane + h)
    span = tl.arange(0, SPAN)[None, None, :, None]
    sz_ptrs = (sz_ptr + tiles[:, :, :, None] * ((K // GROUP_SIZE) * 16) + ((warp_chunk * 64) // GROUP_SIZE * 16)[:, :, :, None] + span * 16
               + (2 * (e64 // 8) + e64 % 2))  # 8-byte loads
    acc = tl.zeros((WARPS, TPW, 128), dtype=tl.float32)
    bias = _gemv_bias(b_ptr, rows % N, HAS_BIAS)
    BK: tl.constexpr = 64 * CHUNKS * (WARPS if WARP_K else 1)  # a program's features a step
    ONE_STEP: tl.constexpr = K // BK == SPLIT_K  # each program one step: nothing to prefetch inside the loop
    step = SPLIT_K * BK
    k_first = pid_k * BK
    k_last = k_first + (K - BK - k_first) // step * step  # the program's last step (K % BK == 0)
    if PREFETCH:  # step 0's reads (every program has a step: the splits never outnumber the steps); under PDL, x's after the wait
        words_n, sz_n = _tc_weights(w_ptrs, sz_ptrs, k_first, GROUP_SIZE, FLIP)
        _pdl_wait(PDL)
        if not X_NOW:
            b0_n, b1_n = _tc_x(x_ptrs, k_first, FLIP)
    else:
        _pdl_wait(PDL)
    for k0 in tl.range(k_first, K, step, num_stages=STAGES):
        if PREFETCH:  # this step's reads arrived during the last step; request the next step's now
            # past the last step, the last step's reads again: unmasked reads, no zero-filled registers (21 fewer instructions
            # a step than masked reads, 1.4-2.8% faster at the six tensor-core shapes on the H100, ab-int4-tc-clamp-*.json)
            k_next = tl.minimum(k0 + step, k_last)
            words, sz = words_n, sz_n
            if not ONE_STEP:
                words_n, sz_n = _tc_weights(w_ptrs, sz_ptrs, k_next, GROUP_SIZE, FLIP)
            if X_NOW:  # x read for the step that uses it (cache hits), not held a step: fewer registers across the loop
                b0, b1 = _tc_x(x_ptrs, k0, FLIP)
            else:
                b0, b1 = b0_n, b1_n
                if not ONE_STEP:
                    b0_n, b1_n = _tc_x(x_ptrs, k_next, FLIP)
        else:
            words, sz = _tc_weights(w_ptrs, sz_ptrs, k0, GROUP_SIZE, FLIP)
            b0, b1 = _tc_x(x_ptrs, k0, FLIP)
        acc = _tc_step(acc, words, b0, b1, sz, ASM, XSUM_ASM, HALF, TPW, WARPS, CHUNKS, SPAN, Q_BIAS)
    if WARP_K:  # the warps' sums of the same tiles, met in shared memory: one [1, TILES, 128] block from here
        acc = tl.reshape(tl.sum(acc, axis=0), (1, TILES, 128))
    _pdl_trigger(PDL, 3)
    cols = 2 * t + c % 2
    valid = (own_out < n_tiles) & (rows < N) & (cols < M)
    p_ptrs = p_ptr + cols * N + rows
    last = True
    if FIXUP_WAIT:
        acc, last = _split_k_total_waiting(acc, p_ptrs, M * N, valid, pid_k, SPLIT_K)
    elif SPLIT_K > 1:
        acc, last = _split_k_total(acc, p_ptrs, M * N, valid, c_ptr + pid_n, pid_k, SPLIT_K)
    if last:
        if HAS_BIAS:
            acc += bias
        tl.store(y_ptr + cols * stride_ym + rows * stride_yn, acc.to(y_ptr.dtype.element_ty), mask=valid)


def _int8_tiled_kernel(
    x_ptr,  # [M, K] activations (fp16 / bf16 / fp32)
    w_ptr,  # [N, K] int8 weight
    s_ptr,  # [N] per-row scales
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [M, N] output, x's dtype
    M, N, K,  # problem size
    stride_xm, stride_xk,  # x strides
    stride_wn, stride_wk,  # w strides
    stride_ym, stride_yn,  # y strides
    HAS_BIAS: tl.constexpr,  # add the bias
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 activations (no tf32), ignored for 16-bit
    BLOCK_M: tl.constexpr,  # output tile rows
    BLOCK_N: tl.constexpr,  # output tile columns
    BLOCK_K: tl.constexpr,  # K step
    GROUP_M: tl.constexpr,  # tile rows walked together (L2 reuse of the weight tiles)
):
    # grouped ordering of the output tiles (tutorial 03)
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_xm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_wn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_xm[:, None] * stride_xm + offs_k[None, :] * stride_xk  # [BM, BK]
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_wn[None, :] * stride_wn  # [BK, BN]: W^T tile
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0)
        # int8 -> x's dtype is exact (|q| <= 127 fits fp16/bf16 mantissas)
        acc = tl.dot(x, w.to(x.dtype), acc, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    scale = tl.load(s_ptr + offs_wn).to(tl.float32)  # [BN]
    acc = acc * scale[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_wn).to(tl.float32)[None, :]
    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_ptrs = y_ptr + offs_ym[:, None] * stride_ym + offs_yn[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_ym[:, None] < M) & (offs_yn[None, :] < N))


def _tiled_group(s_ptr, z_ptr, offs_wn, g, stride_sn, stride_sg, stride_zn, stride_zg):
    """The tiled int4 kernel's scales and zeros of group g for its columns, [1, BLOCK_N] fp32."""
    scale = tl.load(s_ptr + offs_wn * stride_sn + g * stride_sg).to(tl.float32)[None, :]
    zero = tl.load(z_ptr + offs_wn * stride_zn + g * stride_zg).to(tl.float32)[None, :]
    return scale, zero


def _tc_words_tile(words, TILES: tl.constexpr, CHUNKS: tl.constexpr):
    """Tensor-core words [TILES, CHUNKS, 128] (`shuffle_int4_for_tc`) -> their codes as W^T
    [64 CHUNKS features, 16 TILES rows] in natural order, fp32. Word element 4 lane + j, lane 4g + t,
    holds nibble i = 4p + 2e + h of weight row 16 tile + 2g + h at feature 64 chunk + 16t + 4j + 2e + p:
    ordered (chunk, t, j, e, p) the features, (tile, g, h) the rows, are 0, 1, 2, ... in turn."""
    low = tl.join(tl.join(words & 0xF, (words >> 4) & 0xF), tl.join((words >> 8) & 0xF, (words >> 12) & 0xF))  # nibbles 0-3: [.., h, e]
    high = tl.join(tl.join((words >> 16) & 0xF, (words >> 20) & 0xF), tl.join((words >> 24) & 0xF, (words >> 28) & 0xF))
    codes = tl.join(low, high).to(tl.float32)  # [.., h, e, p]
    codes = tl.reshape(codes, (TILES, CHUNKS, 8, 4, 4, 2, 2, 2))  # [tile, chunk, g, t, j, h, e, p]
    return tl.reshape(tl.permute(codes, (1, 3, 4, 6, 7, 0, 2, 5)), (64 * CHUNKS, 16 * TILES))  # [chunk t j e p, tile g h]


def _int4_tiled_kernel(
    x_ptr,  # [M, K] activations (fp16 / bf16 / fp32)
    w_ptr,  # [N, K/2] uint8, low nibble = even k
    s_ptr,  # [N, K/G] group scales
    z_ptr,  # [N, K/G] group zeros
    b_ptr,  # [N] bias; read only when HAS_BIAS
    y_ptr,  # [M, N] output, x's dtype
    M, N, K,  # problem size (K in features)
    stride_xm, stride_xk,  # x strides
    stride_wn, stride_wk,  # w strides (bytes)
    stride_sn, stride_sg,  # scales strides
    stride_zn, stride_zg,  # zeros strides
    stride_ym, stride_yn,  # y strides
    GROUP_SIZE: tl.constexpr,  # G, a multiple of BLOCK_K
    HAS_BIAS: tl.constexpr,  # add the bias
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 activations (no tf32), ignored for 16-bit
    BLOCK_M: tl.constexpr,  # output tile rows
    BLOCK_N: tl.constexpr,  # output tile columns
    BLOCK_K: tl.constexpr,  # K step in features (>= 32: two dots of BLOCK_K / 2)
    GROUP_M: tl.constexpr,  # tile rows walked together (L2 reuse of the weight tiles)
    TC_WORDS: tl.constexpr = False,  # w_ptr: the tensor-core GEMV's words [cdiv(N, 16), K/64, 32, 4] instead of the packed bytes (BLOCK_N % 16 == 0, BLOCK_K % 64 == 0)
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_xm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_wn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TC_WORDS:  # one [BLOCK_K, BLOCK_N] tile of W^T a step from the words, x in natural order: one dot
        tiles = tl.minimum(pid_n * (BLOCK_N // 16) + tl.arange(0, BLOCK_N // 16), tl.cdiv(N, 16) - 1)  # the last tiles repeat (never stored)
        words_ptrs = w_ptr + tiles[:, None, None] * ((K // 64) * 128) + tl.arange(0, BLOCK_K // 64)[None, :, None] * 128 + tl.arange(0, 128)[None, None, :]
        x_ptrs = x_ptr + offs_xm[:, None] * stride_xm + tl.arange(0, BLOCK_K)[None, :] * stride_xk  # [BM, BK]
        for k0 in range(0, K, BLOCK_K):
            x = tl.load(x_ptrs)
            scale, zero = _tiled_group(s_ptr, z_ptr, offs_wn, k0 // GROUP_SIZE, stride_sn, stride_sg, stride_zn, stride_zg)
            codes = _tc_words_tile(tl.load(words_ptrs + (k0 // 64) * 128), BLOCK_N // 16, BLOCK_K // 64)
            acc = tl.dot(x, ((codes - 8.0) * scale + zero).to(x.dtype), acc, input_precision=DOT_PRECISION)
            x_ptrs += BLOCK_K * stride_xk
    else:
        offs_j = tl.arange(0, BLOCK_K // 2)  # byte j: features 2j (low nibble), 2j+1 (high)
        x_ptrs = x_ptr + offs_xm[:, None] * stride_xm + (2 * offs_j[None, :]) * stride_xk  # [BM, BK/2] even k
        w_ptrs = w_ptr + offs_j[:, None] * stride_wk + offs_wn[None, :] * stride_wn  # [BK/2, BN] bytes of W^T
        for k0 in range(0, K, BLOCK_K):  # K % BLOCK_K == 0: no masks
            x_even = tl.load(x_ptrs)  # [BM, BK/2]
            x_odd = tl.load(x_ptrs + stride_xk)
            packed = tl.load(w_ptrs)  # [BK/2, BN] uint8
            scale, zero = _tiled_group(s_ptr, z_ptr, offs_wn, k0 // GROUP_SIZE, stride_sn, stride_sg, stride_zn, stride_zg)
            w_even = (((packed & 0xF).to(tl.float32) - 8.0) * scale + zero).to(x_even.dtype)  # [BK/2, BN]
            w_odd = (((packed >> 4).to(tl.float32) - 8.0) * scale + zero).to(x_even.dtype)
            acc = tl.dot(x_even, w_even, acc, input_precision=DOT_PRECISION)
            acc = tl.dot(x_odd, w_odd, acc, input_precision=DOT_PRECISION)
            x_ptrs += BLOCK_K * stride_xk
            w_ptrs += (BLOCK_K // 2) * stride_wk
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_wn).to(tl.float32)[None, :]
    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_ptrs = y_ptr + offs_ym[:, None] * stride_ym + offs_yn[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_ym[:, None] < M) & (offs_yn[None, :] < N))


_JITTED: dict[tuple[str, bool], Any] = {}
_DEVICE_HELPERS = ("_tc_load", "_pdl_trigger", "_pdl_wait", "_split_k_total", "_split_k_total_waiting", "_read_slots", "_empty_slots", "_gemv_bias", "_store_gemv_rows", "_store_gemv_vector", "_int4_rows_side_loads", "_int4_tc_emulated", "_tc_x_matrix", "_tc_weights", "_tc_x", "_tc_step", "_int8_to_f32", "_tc_words_tile", "_tiled_group")  # plain functions the kernels call; jitted alongside them when compiling


def _jit(fn):
    """`triton.jit(fn)`, made once per interpreter setting (read at launch, not at import).

    The interpreter runs a kernel as Python, so its helpers stay plain functions there; the
    compiler needs them jitted, so a compiled kernel is made from a copy of `fn` whose globals
    name the jitted helpers.
    """
    import triton

    from agnitra.kernels.spec import interpreting

    key = (fn.__name__, interpreting())
    if key not in _JITTED:
        helpers = [name for name in _DEVICE_HELPERS if name in fn.__code__.co_names]
        if helpers and not interpreting():
            scope = {**fn.__globals__, **{name: _jit(globals()[name]) for name in helpers}}
            clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
            fn = functools.update_wrapper(clone, fn, assigned=("__module__", "__qualname__", "__doc__", "__annotations__"), updated=())
        _JITTED[key] = triton.jit(fn)
    return _JITTED[key]


# ============================================================================================
# Part 2: host wrappers
# ============================================================================================


def _block_m(m: int) -> int:
    """GEMV rows per program: the power of two at or above M, at most GEMV_MAX_M."""
    return min(pow2_bucket(max(m, 1)), GEMV_MAX_M)


def _dot_precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"  # 16-bit operands ignore it


def _check_device(x: torch.Tensor) -> None:
    ok, why = triton_available(x.device)
    if not ok:
        raise RuntimeError(why)


def _check_activations(x: torch.Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"x must be fp16, bf16 or fp32, got {x.dtype}")


def _check_vector(name: str, t: torch.Tensor | None, n: int, device: torch.device) -> None:
    if t is None:
        return
    if tuple(t.shape) != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one per output channel), got {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, x on {device}")


def _check_out(out: torch.Tensor | None, m: int, n: int, x: torch.Tensor) -> torch.Tensor:
    if out is None:
        return torch.empty((m, n), device=x.device, dtype=x.dtype)
    if tuple(out.shape) != (m, n) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"out must be [{m}, {n}] {x.dtype} on {x.device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    return out


def _output_and_path(x: torch.Tensor, n: int, bias: torch.Tensor | None, out: torch.Tensor | None, config: dict[str, Any] | None) -> tuple[torch.Tensor, str | None]:
    """A weight-only matmul's output [M, N] and path, after the checks they share (bias, out, a
    device the kernels run on); path None when M == 0 (nothing to launch)."""
    m = x.shape[0]
    _check_vector("bias", bias, n, x.device)
    y = _check_out(out, m, n, x)
    if m == 0:
        return y, None
    _check_device(x)
    return y, _choose_path(config, m)


def _choose_path(config: dict[str, Any] | None, m: int) -> str:
    path = (config or {}).get("path") or ("gemv" if m <= GEMV_MAX_M else "tiled")
    if path not in ("gemv", "tiled"):
        raise ValueError(f"config path must be 'gemv' or 'tiled', got {path!r}")
    return path


def _launch_options(cfg: dict[str, Any]) -> dict[str, int]:
    options = {"num_warps": int(cfg.get("num_warps", 4)), "num_stages": int(cfg.get("num_stages", 2))}
    if cfg.get("maxnreg"):  # ptxas's register cap (occupancy against spills)
        options["maxnreg"] = int(cfg["maxnreg"])
    return options


def _stages(cfg: dict[str, Any]) -> int:
    """A GEMV loop's software-pipeline depth (config key STAGES, default 1: loads straight to registers).

    Triton pipelines a loop without tl.dot only when the loop itself asks (`tl.range(num_stages=...)`);
    the launch option num_stages alone leaves such loops as they are."""
    stages = cfg.get("STAGES", 1)
    if not isinstance(stages, int) or not 1 <= stages <= 8:
        raise ValueError(f"config STAGES must be an integer from 1 to 8, got {stages!r}")
    return stages


def _positive_pow2(cfg: dict[str, Any], *keys: str) -> None:
    for key in keys:
        v = cfg[key]
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise ValueError(f"config {key} must be a positive power of two, got {v!r}")


def _positive_int(cfg: dict[str, Any], key: str) -> None:
    v = cfg[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"config {key} must be a positive integer, got {v!r}")


def _check_split_k_steps(cfg: dict[str, Any], k: int, kernel: str) -> None:
    """Every split has a step: the prefetching int4 GEMVs read a program's first step before their
    loop, which a split with no step would read past the end of x and the weight."""
    steps = _cdiv(k, cfg["BLOCK_K"])
    if cfg["SPLIT_K"] > steps:
        raise ValueError(f"int4 GEMV KERNEL='{kernel}': SPLIT_K={cfg['SPLIT_K']} is more than the {steps} step(s) of BLOCK_K={cfg['BLOCK_K']}"
                         f" in K={k}; use SPLIT_K <= {steps} or a smaller BLOCK_K")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_COUNTERS: dict[torch.device, list[torch.Tensor]] = {}  # every buffer ever handed out stays alive (CUDA graphs hold their addresses)


def _split_k_buffers(split_k: int, m: int, n: int, blocks: int, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 partials [SPLIT_K, M, N] and the arrival counters of an in-kernel split-K fix-up.

    The counters are zero before a launch and the last program of each block resets its own, so
    one buffer per device serves every launch in stream order. Two split-K GEMVs running at the
    same time on different streams would share counters: the GEMVs here run on one stream.
    """
    if split_k == 1:  # not read: the kernel's split-K branch is compiled out
        return y, y
    device = y.device
    return torch.empty((split_k, m, n), device=device, dtype=torch.float32), reserve_split_k_counters(device, blocks)


def _reserved(buffers: dict, device: torch.device, count: int, fill: int, what: str, reserve: str, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """The device's persistent buffer of `buffers` with at least `count` elements (65536 at least): int32
    words filled with `fill` when made, seen as `dtype`; a larger one is made when needed and the old
    ones stay alive (CUDA graphs hold their addresses). Made inside a CUDA graph capture it would be an
    allocation of the graph's pool that outlives the step, which torch refuses ("tensors in the
    cudagraph pool not tracked as outputs"): there a shortfall is an error naming `reserve`, the call
    that makes it first."""
    device = torch.device(device)
    held = buffers.setdefault(device, [])
    if not held or held[-1].numel() < count:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{count} {what} are needed on {device}, more than were reserved before this CUDA graph capture:"
                               f" call agnitra.kernels.quant_matmul.{reserve}(device, {count}) before capturing (kernel-backed Linears do when built)")
        held.append(torch.full((max(count, 1 << 16),), fill, dtype=torch.int32, device=device).view(dtype))
    return held[-1]


def reserve_split_k_counters(device: torch.device, blocks: int = 1) -> torch.Tensor:
    """The device's split-K arrival counters (at least `blocks`, zero), made on first use. Kernel-backed
    modules reserve them when they are built, never on a first call inside a CUDA graph capture (`_reserved`)."""
    return _reserved(_COUNTERS, device, blocks, 0, "split-K arrival counters", "reserve_split_k_counters")


_SLOTS: dict[torch.device, list[torch.Tensor]] = {}  # every buffer ever handed out stays alive (CUDA graphs hold their addresses)


def reserve_split_k_slots(device: torch.device, count: int = 1) -> torch.Tensor:
    """The device's split-K slots of the one-round-trip fix-up (config FIXUP "wait"): at least `count`
    fp32, marked empty, made on first use; every launch leaves them empty again. Kernel-backed modules
    whose tuned GEMVs wait reserve them when built, as the counters (`_reserved`)."""
    return _reserved(_SLOTS, device, count, SLOT_EMPTY, "split-K slots of the fix-up FIXUP='wait'", "reserve_split_k_slots", torch.float32)


def _tc_fixup_wait(cfg: dict[str, Any], split_k: int) -> bool:
    """Config FIXUP: "count" (default: the last of a block's splits to arrive sums them, `_split_k_total`)
    or "wait" (split SPLIT_K - 1 waits for its siblings, `_split_k_total_waiting`; the grid is launched
    cooperatively so that all its programs are resident). True where the launch waits."""
    fixup = cfg.get("FIXUP", "count")
    if fixup not in ("count", "wait"):
        raise ValueError(f"int4 GEMV KERNEL='tc' config FIXUP must be 'count' or 'wait', got {fixup!r}")
    return fixup == "wait" and split_k > 1


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
    `int8_gemv_configs` / `int8_tiled_configs`); missing keys take the path's default.
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
        cfg = {**int8_gemv_default_config(shape, x.dtype), **(config or {})}
        _positive_pow2(cfg, "BLOCK_N", "BLOCK_K", "SPLIT_K")
        block_m, split_k = _block_m(m), cfg["SPLIT_K"]
        grid = (_cdiv(n, cfg["BLOCK_N"]), split_k, _cdiv(m, block_m))
        partials, counters = _split_k_buffers(split_k, m, n, grid[0] * grid[2], y)
        _jit(_int8_gemv_kernel)[grid](
            x, w_int8, scales, bias if bias is not None else scales, y, partials, counters,
            m, n, k,
            x.stride(0), x.stride(1), w_int8.stride(0), w_int8.stride(1), y.stride(0), y.stride(1),
            HAS_BIAS=bias is not None, EVEN_K=k % cfg["BLOCK_K"] == 0,
            BLOCK_M=block_m, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], SPLIT_K=split_k, STAGES=_stages(cfg),
            CVT_ASM=_ptx(INT8_TO_F32_ASM), **_launch_options(cfg), **pdl_options(x, cfg),
        )
        return y
    cfg = {**int8_tiled_default_config(shape, x.dtype), **(config or {})}
    _positive_pow2(cfg, "BLOCK_M", "BLOCK_N", "BLOCK_K")
    if min(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) < 16:
        raise ValueError(f"tiled path: BLOCK_M, BLOCK_N and BLOCK_K must be >= 16 (tl.dot), got {cfg}")
    grid = (_cdiv(m, cfg["BLOCK_M"]) * _cdiv(n, cfg["BLOCK_N"]),)
    _jit(_int8_tiled_kernel)[grid](
        x, w_int8, scales, bias if bias is not None else scales, y,
        m, n, k,
        x.stride(0), x.stride(1), w_int8.stride(0), w_int8.stride(1), y.stride(0), y.stride(1),
        HAS_BIAS=bias is not None, DOT_PRECISION=_dot_precision(x.dtype),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg.get("GROUP_M", 8),
        **_launch_options(cfg),
    )
    return y


def _groups_a_step(block_k: int, group_size: int, k: int) -> int:
    """Groups a loop step of BLOCK_K features spans: 1 when BLOCK_K divides the group, BLOCK_K / G
    when it is a multiple of G that divides K (the row kernel's long steps), 0 otherwise."""
    if group_size % block_k == 0:
        return 1
    return block_k // group_size if block_k % group_size == 0 and k % block_k == 0 else 0


def _check_int4_block_k(block_k: int, group_size: int, path: str, spans_k: int | None = None) -> None:
    """BLOCK_K divides the group (one scale/zero per chunk) or, given `spans_k` (the row kernel's K),
    is a multiple of it dividing K (a scale/zero per group of the step)."""
    least = 32 if path == "tiled" else 2
    groups = _groups_a_step(block_k, group_size, spans_k) if spans_k else int(group_size % block_k == 0)
    if block_k < least or not groups:
        several = f" or a multiple of it dividing K={spans_k}" if spans_k else ""
        raise ValueError(
            f"int4 {path} path: BLOCK_K={block_k} must divide group_size={group_size} (one scale/zero per chunk){several}"
            f" and be at least {least}; pick BLOCK_K in {[b for b in (2, 4, 8, 16, 32, 64, 128, 256, 512) if b >= least and group_size % b == 0]}"
        )


def _check_int4_gemv_config(cfg: dict[str, Any], group_size: int, k: int) -> str:
    """An int4 GEMV config's blocks, kernel, step against the groups and split against K; its KERNEL."""
    kernel = cfg.get("KERNEL", "bytes")
    if kernel not in ("rows", "words", "bytes", "mma", "tc"):
        raise ValueError(f"int4 GEMV KERNEL must be 'rows', 'words', 'bytes', 'mma' or 'tc', got {kernel!r}")
    _positive_pow2(cfg, "BLOCK_N", "BLOCK_K", *(() if kernel == "tc" else ("SPLIT_K",)))
    if kernel == "tc":  # any split: K = 14336 is 112 steps of 128, 8 a program in 14 splits
        _positive_int(cfg, "SPLIT_K")
    _check_int4_block_k(cfg["BLOCK_K"], group_size, "gemv", spans_k=k if kernel in ("rows", "tc") else None)
    if kernel in ("rows", "words", "tc"):
        _check_split_k_steps(cfg, k, kernel)
    return kernel


def _int4_words(w_packed: torch.Tensor) -> torch.Tensor | None:
    """The packed codes as int32 words [N, K/8] (a view), or None when rows are not whole aligned words."""
    if w_packed.stride(1) != 1 or w_packed.shape[1] % 4 or w_packed.stride(0) % 4 or w_packed.data_ptr() % 4:
        return None
    return w_packed.view(torch.int32)


def _int4_batch1_gemv(kernel: str, x, w_packed, scales, zeros, group_size, bias, y, cfg) -> None:
    """The batch-1 int4 GEMVs over 32-bit words: KERNEL 'rows' (`_int4_gemv_rows_kernel`) or 'words'."""
    m, k = x.shape
    n = w_packed.shape[0]
    words = _int4_words(w_packed)
    block_k, block_n, vec = cfg["BLOCK_K"], cfg["BLOCK_N"], cfg.get("VEC", 2)
    rows = kernel == "rows"
    if rows:  # BLOCK_K fits the groups (_check_int4_block_k)
        limits = "up to 256 (2048 for several groups a step), BLOCK_N <= N and VEC in (1, 2, 4) at most BLOCK_K / 8"
        fits = block_k <= (2048 if block_k > group_size else 256) and block_n <= n and vec in (1, 2, 4) and 8 * vec <= block_k
    else:
        limits, fits = "(>= 16)", block_k >= 16
    if m != 1 or words is None or block_k % 8 or not fits:
        raise ValueError(
            f"int4 GEMV KERNEL='{kernel}' needs M == 1, rows of whole 4-byte-aligned words (K % 8 == 0) and BLOCK_K a multiple of 8"
            f" {limits}; got M={m}, N={n}, K={k}, BLOCK_K={block_k}, BLOCK_N={block_n}, VEC={vec}, group_size={group_size}:"
            f" use KERNEL='bytes'{' or a smaller BLOCK_N' if rows else ''}"
        )
    prefetch = int(cfg.get("PREFETCH", 0))
    if prefetch not in ((0, 1, 2) if rows else (0, 1)):
        raise ValueError(f"int4 GEMV KERNEL='{kernel}': PREFETCH must be {'0, 1 (the words) or 2 (words, x, scales and zeros)' if rows else 'False or True'}, got {cfg['PREFETCH']!r}")
    split_k = cfg["SPLIT_K"]
    grid = (_cdiv(n, block_n), split_k)
    partials, counters = _split_k_buffers(split_k, 1, n, grid[0], y)
    if rows:  # the row stride is compiled in
        fn, row_stride, extra = _int4_gemv_rows_kernel, (), {"STRIDE_W": words.stride(0), "PRECISE": x.dtype == torch.float32, "VEC": vec}
    else:
        fn, row_stride, extra = _int4_gemv_words_kernel, (words.stride(0),), {}
    _jit(fn)[grid](
        x, words, scales, zeros, bias if bias is not None else scales, y, partials, counters,
        n, k, x.stride(1), *row_stride,
        scales.stride(0), scales.stride(1), zeros.stride(0), zeros.stride(1), y.stride(1),
        GROUP_SIZE=group_size, HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_W=block_k // 8, SPLIT_K=split_k,
        PREFETCH=prefetch, STAGES=_stages(cfg), **extra, **_launch_options(cfg), **(pdl_options(x, cfg) if rows else {}),
    )


def _check_int4_mma(cfg: dict[str, Any], x: torch.Tensor, m: int) -> None:
    """The tensor-core GEMV: 16-bit activations, M <= 16 (the MMA's padded columns), MMA-sized blocks."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"int4 GEMV with MMA=True needs fp16 or bf16 activations, got {x.dtype}; use MMA=False")
    if m > 16:
        raise ValueError(f"int4 GEMV with MMA=True handles M <= 16 rows, got M={m}; use the tiled path")
    if cfg["BLOCK_N"] < 16 or cfg["BLOCK_K"] < 32:
        raise ValueError(f"int4 GEMV with MMA=True needs BLOCK_N >= 16 and BLOCK_K >= 32 (tl.dot tiles), got {cfg}")


def shuffle_int4_for_tc(w_packed: torch.Tensor) -> torch.Tensor:
    """`pack_int4` codes [N, K/2] -> int32 words [cdiv(N, 16), K/64, 32, 4] in mma.m16n8k16 A-fragment
    order, the tensor-core GEMV's weight (rows past N are code 0 and never stored).

    Word (tile, chunk, lane, j) holds the 8 codes lane l = 4g + t supplies to MMA j of the chunk's
    four: nibble i = 4p + 2e + h is MMA row g + 8h and MMA feature 16j + 8e + 2t + p, so
    (w >> 4r) & 0x000F000F holds A register r's two codes. MMA row g + 8h is weight row
    16 tile + 2g + h: a lane's C rows are then adjacent (one 8-byte load of their scales and
    zeros, `_int4_tc_scales`). MMA feature 16j + 8e + 2t + p is x feature 64 chunk + 16t + 4j +
    2e + p: lane t's B fragments of the four MMAs are the 16 consecutive x values 16t..16t + 15 of
    the chunk (two 16-byte loads), MMA j's a register pair of them."""
    n, k = w_packed.shape[0], 2 * w_packed.shape[1]
    if k % 64:
        raise ValueError(f"the tensor-core int4 GEMV needs K % 64 == 0, got K={k}")
    tiles = -(-n // 16)
    words = torch.empty(tiles, k // 64, 32, 4, dtype=torch.int32, device=w_packed.device)
    step = max(1, (1 << 24) // (16 * k))  # tiles a pass: ~64 MB of int32 codes at a time, not the whole matrix
    for first in range(0, tiles, step):
        rows = w_packed[16 * first:16 * (first + step)]
        count = -(-rows.shape[0] // 16)
        q = torch.nn.functional.pad(unpack_int4(rows).to(torch.int32), (0, 0, 0, 16 * count - rows.shape[0]))
        q = q.view(count, 8, 2, k // 64, 4, 4, 2, 2).permute(0, 3, 1, 4, 5, 7, 6, 2)  # [tile, g, h, chunk, t, j, e, p] -> [tile, chunk, g, t, j, p, e, h]
        q = q.reshape(count, k // 64, 32, 4, 8)
        packed = q[..., 0]
        for i in range(1, 8):
            packed = packed | (q[..., i] << (4 * i))  # int32 bit fields (the top one wraps the sign: the bits are what count)
        words[first:first + count] = packed
    return words


def unshuffle_int4_from_tc(words: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of `shuffle_int4_for_tc`: words [cdiv(N, 16), K/64, 32, 4] -> `pack_int4` codes
    [N, K/2] (the padding rows past N dropped), in passes of ~64 MB of codes as the shuffle."""
    tiles, chunks = words.shape[0], words.shape[1]
    if words.dim() != 4 or tuple(words.shape[2:]) != (32, 4) or words.dtype != torch.int32 or not 16 * (tiles - 1) < n <= 16 * tiles:
        raise ValueError(f"tensor-core words must be int32 [cdiv(N, 16), K/64, 32, 4] for N={n}, got {tuple(words.shape)} {words.dtype}")
    k = 64 * chunks
    packed = torch.empty(n, k // 2, dtype=torch.uint8, device=words.device)
    step = max(1, (1 << 24) // (16 * k))
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    for first in range(0, tiles, step):
        part = words[first:first + step]
        count = part.shape[0]
        q = ((part[..., None] >> shifts) & 0xF).to(torch.uint8)  # [tile, chunk, 32, 4, 8]: nibble i = 4p + 2e + h
        q = q.view(count, chunks, 8, 4, 4, 2, 2, 2).permute(0, 2, 7, 1, 3, 4, 6, 5)  # [tile, chunk, g, t, j, p, e, h] -> [tile, g, h, chunk, t, j, e, p]
        rows = q.reshape(16 * count, k)[: n - 16 * first]
        packed[16 * first:16 * first + rows.shape[0]] = pack_int4(rows)
    return packed


def _int4_tc_words(w_packed: torch.Tensor) -> torch.Tensor:
    """`shuffle_int4_for_tc(w_packed)`, made once per weight (kept on the tensor, remade if it is written in place)."""
    cached = getattr(w_packed, "_agnitra_tc_words", None)
    if cached is None or cached[0] != w_packed._version:
        cached = (w_packed._version, shuffle_int4_for_tc(w_packed))
        w_packed._agnitra_tc_words = cached
    return cached[1]


def _int4_tc_scales(scales: torch.Tensor, zeros: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """scales, zeros [N, K/G] -> int32 [cdiv(N, 16), K/G, 16]: each row's scale (low half) and zero
    (high half) in `dtype` (x's), tile by tile, so a lane's two C rows (2g, 2g + 1) are one 8-byte
    load; made once per (scales, zeros) pair (kept on the scales tensor, remade after in-place writes)."""
    key = (zeros.data_ptr(), scales._version, zeros._version, dtype)
    cached = getattr(scales, "_agnitra_tc_scales", None)
    if cached is None or cached[0] != key:
        n, groups = scales.shape
        tiles = -(-n // 16)
        halves = torch.stack((scales.to(dtype), zeros.to(dtype)), dim=-1).view(torch.int32)[..., 0]  # [N, K/G]: (s, z) pairs
        halves = torch.nn.functional.pad(halves, (0, 0, 0, tiles * 16 - n))
        cached = (key, halves.view(tiles, 16, groups).transpose(1, 2).contiguous())
        scales._agnitra_tc_scales = cached
    return cached[1]


def int4_tc_operands(w_packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(shuffled words, (s, z) pairs) for the tensor-core GEMV, made ahead of time by a module that
    owns the weight: made lazily inside a CUDA graph capture they would be allocations in the
    graph's pool (torch refuses them). (None, None) when the kernel cannot run on these weights
    (K or the group size not a multiple of 64, scales not 16-bit). The words are the int4 weight's
    size; a module keeps the packed bytes as well only where a kernel over them (the row, word or
    byte GEMV) serves its batch-1 calls (`int4_words_matmul` runs the rest over the words)."""
    k = 2 * w_packed.shape[1]
    if k % 64 or group_size % 64 or scales.dtype not in (torch.float16, torch.bfloat16):
        return None, None
    return shuffle_int4_for_tc(w_packed), _int4_tc_scales(scales, zeros, scales.dtype)


_TC_WARP_K_CHUNKS = 16  # WARP_K: the most 64-feature chunks a warp a step (64 registers of words a thread)


def _int4_tc_gemv(x, n, group_size, bias, y, cfg, operands) -> None:
    """The tensor-core GEMV (`_int4_gemv_tc_kernel`) over N outputs: 16-bit activations, M <= 8, K and
    G multiples of 64; `operands`: (words, (s, z) pairs in x's dtype) as `int4_tc_operands` makes them."""
    m, k = x.shape
    warp_k = bool(cfg.get("WARP_K", False))
    tiles, warps = cfg["BLOCK_N"] // 16, cfg.get("num_warps", 4)
    ways = warps if warp_k else 1  # the warps split BLOCK_K (WARP_K) or BLOCK_N
    chunks = cfg["BLOCK_K"] // (64 * ways)
    if (x.dtype not in (torch.float16, torch.bfloat16) or m > 8 or k % 64 or group_size % 64 or cfg["BLOCK_N"] < (16 if warp_k else 16 * warps)
            or cfg["BLOCK_K"] % (64 * ways) or not 1 <= chunks <= (_TC_WARP_K_CHUNKS if warp_k else 8)):  # BLOCK_K against the groups: `_check_int4_block_k`, by the caller
        split = (f"BLOCK_N >= 16 and BLOCK_K a multiple of 64 * num_warps up to {64 * _TC_WARP_K_CHUNKS} * num_warps (WARP_K: the warps split the step)" if warp_k
                 else "BLOCK_N >= 16 * num_warps (a 16-row tile a warp at least) and BLOCK_K a multiple of 64 up to 512")
        raise ValueError(
            f"int4 GEMV KERNEL='tc' needs fp16/bf16 activations, M <= 8, K and group_size multiples of 64, {split}; got {x.dtype}, M={m}, K={k},"
            f" group_size={group_size}, BLOCK_N={cfg['BLOCK_N']}, num_warps={warps}, BLOCK_K={cfg['BLOCK_K']}: use KERNEL='rows' or 'bytes'"
        )
    pairs = x if x.stride(1) == 1 and x.stride(0) % 2 == 0 and x.data_ptr() % 4 == 0 else x.contiguous()
    pairs = pairs.view(torch.int32)
    split_k = cfg["SPLIT_K"]
    grid = (_cdiv(_cdiv(n, 16), tiles), split_k)
    wait = _tc_fixup_wait(cfg, split_k)
    partials, counters = (reserve_split_k_slots(y.device, (split_k - 1) * m * n), y) if wait else _split_k_buffers(split_k, m, n, grid[0], y)
    dtype = tc_constants("bf16" if x.dtype == torch.bfloat16 else "fp16")
    dtype.update(ASM=_ptx(dtype["ASM"]), XSUM_ASM=_ptx(dtype["XSUM_ASM"]))  # "" under the interpreter: the emulated MMAs
    # the interpreter runs a grid's programs one after another, splits in order: the waiting one last
    cooperative = {"FIXUP_WAIT": True, **({} if interpreting() else {"launch_cooperative_grid": True})} if wait else {}
    try:
        _jit(_int4_gemv_tc_kernel)[grid](
            pairs, *operands, bias if bias is not None else y, y, partials, counters,
            m, n, k, pairs.stride(0), y.stride(0), y.stride(1),
            GROUP_SIZE=group_size, HAS_BIAS=bias is not None, **dtype, TILES=tiles, WARPS=warps, CHUNKS=chunks, PREFETCH=bool(cfg.get("PREFETCH", False)),
            SPLIT_K=split_k, STAGES=_stages(cfg), **_launch_options(cfg), **pdl_options(x, cfg), **_tc_x_now(cfg), FLIP=tc_flip(), **cooperative,
            **({"WARP_K": True} if warp_k else {}),
        )
    except RuntimeError as exc:
        if wait and "cooperative" in str(exc):
            raise ValueError(f"int4 GEMV KERNEL='tc' FIXUP='wait' launches its {grid[0] * split_k} programs cooperatively (all resident at once) and this GPU"
                             f" cannot hold them: use FIXUP='count', or fewer programs (larger BLOCK_N, smaller SPLIT_K)") from exc
        raise


@functools.lru_cache(maxsize=None)
def tc_flip() -> bool:
    """Whether the tensor-core GEMV loads with dims 0 and 2 swapped (`_tc_load`): where Triton breaks
    ties between equally contiguous dims from the last one (3.7 and 3.9 checked; 3.9 is torch 2.13's)
    rather than the first (3.6), so that the warps stay off the chunk dim. Compiled for sm_90
    (sass-loop-tc-warps-*.jsonl), the llama-8b winners' loops take 363 and 183 instructions a step
    with it under 3.9, no CTA barrier, against 544 and 266 with 52 and 20 barriers without it (3.6,
    unflipped: 379 and 193, unchanged)."""
    import triton

    return tuple(int(part) for part in triton.__version__.split(".")[:2]) > (3, 6)


def _tc_x_now(cfg: dict[str, Any]) -> dict[str, bool]:
    """Config X_NOW (with PREFETCH only): the tensor-core GEMV reads x in the step that uses it."""
    if not cfg.get("X_NOW"):
        return {}
    if not cfg.get("PREFETCH"):
        raise ValueError("int4 GEMV KERNEL='tc' X_NOW reads x just in time while the words are prefetched: it needs PREFETCH=True")
    return {"X_NOW": True}


def _ptx(asm: str) -> str:
    """Inline PTX for a kernel, or "" under the interpreter, which cannot run PTX (the kernels then
    take their arithmetic path)."""
    from agnitra.kernels.spec import interpreting

    return "" if interpreting() else asm


def _check_int4_inputs(x, w_packed, scales, zeros, group_size) -> tuple[int, int, int]:
    _check_activations(x)
    if w_packed.dim() != 2 or w_packed.dtype != torch.uint8:
        raise ValueError(f"w_packed must be a 2-D uint8 tensor [N, K/2] (two int4 codes per byte), got {tuple(w_packed.shape)} {w_packed.dtype}")
    m, k = x.shape
    n = w_packed.shape[0]
    if 2 * w_packed.shape[1] != k:
        raise ValueError(f"x has K={k} features but w_packed is {tuple(w_packed.shape)} (expected [N, {k // 2}] for K={k}: two codes per byte)")
    if not isinstance(group_size, int) or group_size < 2 or group_size % 2:
        raise ValueError(f"group_size must be a positive even integer, got {group_size!r}")
    if k % group_size:
        raise ValueError(f"K={k} is not a multiple of group_size={group_size}")
    if n == 0 or k == 0:
        raise ValueError(f"empty problem: N={n}, K={k}")
    if w_packed.device != x.device:
        raise ValueError(f"w_packed is on {w_packed.device}, x on {x.device}")
    _check_scales_and_zeros(x, scales, zeros, n, group_size)
    return m, n, k


def _check_scales_and_zeros(x: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, n: int, group_size: int) -> None:
    k = x.shape[1]
    for name, t in (("scales", scales), ("zeros", zeros)):
        if tuple(t.shape) != (n, k // group_size):
            raise ValueError(f"{name} must be [N, K/group_size] = [{n}, {k // group_size}], got {tuple(t.shape)}")
        if not t.is_floating_point() or t.device != x.device:
            raise ValueError(f"{name} must be a floating-point tensor on {x.device}, got {t.dtype} on {t.device}")


def int4_weight_only_matmul(
    x: torch.Tensor,
    w_packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    config: dict[str, Any] | None = None,
    out: torch.Tensor | None = None,
    tc_operands: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """y [M, N] = x [M, K] @ W'^T (+ bias), W'[n, k] = (q[n, k] - 8) * scales[n, k // G] + zeros[n, k // G].

    `w_packed` [N, K/2] uint8, low nibble = even k (`pack_int4`); scales, zeros [N, K/G].
    `config` as for `int8_weight_only_matmul`; BLOCK_K must divide group_size (ValueError), or for
    the batch-1 row kernel be a multiple of it that divides K. `tc_operands`: `int4_tc_operands`
    of these weights for KERNEL 'tc' (in x's dtype; made and cached on the tensors when absent).
    """
    m, n, k = _check_int4_inputs(x, w_packed, scales, zeros, group_size)
    y, path = _output_and_path(x, n, bias, out, config)
    if path is None:
        return y
    shape = (m, n, k, group_size)
    if path == "gemv":
        cfg = {**int4_gemv_default_config(shape, x.dtype), **(config or {})}
        kernel = _check_int4_gemv_config(cfg, group_size, k)
        if kernel in ("rows", "words"):
            _int4_batch1_gemv(kernel, x, w_packed, scales, zeros, group_size, bias, y, cfg)
            return y
        if kernel == "tc":
            _int4_tc_gemv(x, n, group_size, bias, y, cfg, tc_operands or (_int4_tc_words(w_packed), _int4_tc_scales(scales, zeros, x.dtype)))
            return y
        split_k, n_blocks = cfg["SPLIT_K"], _cdiv(n, cfg["BLOCK_N"])
        if kernel == "mma":
            _check_int4_mma(cfg, x, m)
            fn, grid, extra = _int4_gemv_mma_kernel, (n_blocks, split_k), {"ASM_DEQUANT": _ptx(INT4_ASM_BF16 if x.dtype == torch.bfloat16 else INT4_ASM_FP16)}
        else:
            block_m = _block_m(m)
            fn, grid, extra = _int4_gemv_kernel, (n_blocks, split_k, _cdiv(m, block_m)), {"BLOCK_M": block_m}
        partials, counters = _split_k_buffers(split_k, m, n, n_blocks * _cdiv(m, _block_m(m)), y)
        _jit(fn)[grid](
            x, w_packed, scales, zeros, bias if bias is not None else scales, y, partials, counters,
            m, n, k,
            x.stride(0), x.stride(1), w_packed.stride(0), w_packed.stride(1),
            scales.stride(0), scales.stride(1), zeros.stride(0), zeros.stride(1), y.stride(0), y.stride(1),
            GROUP_SIZE=group_size, HAS_BIAS=bias is not None,
            BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], SPLIT_K=split_k, **extra,
            **_launch_options(cfg),
        )
        return y
    cfg = {**int4_tiled_default_config(shape, x.dtype), **(config or {})}
    if config and "BLOCK_K" in config and "TC_WORDS" not in config:  # a step chosen for the packed bytes: the default's words do not apply
        cfg.pop("TC_WORDS", None)
    _int4_tiled(x, _tiled_weight(w_packed, cfg, tc_operands), n, scales, zeros, group_size, bias, y, cfg)
    return y


def int4_words_matmul(
    x: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    config: dict[str, Any] | None = None,
    tc_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """`int4_weight_only_matmul` for a weight kept only as the tensor-core words (`shuffle_int4_for_tc`,
    N = scales' rows): path "gemv" is the tensor-core GEMV (KERNEL 'tc'; M <= 8, 16-bit x, `tc_scales`
    = `int4_tc_operands`' pairs in x's dtype), path "tiled" the tiled kernel over the words (TC_WORDS;
    any M and float dtype). The row, word and byte GEMVs read the packed bytes: not here."""
    _check_activations(x)
    m, k = x.shape
    n = scales.shape[0]
    if words.dim() != 4 or tuple(words.shape) != (_cdiv(n, 16), k // 64, 32, 4) or words.dtype != torch.int32 or k % 64:
        raise ValueError(f"words must be int32 [cdiv(N, 16), K/64, 32, 4] = [{_cdiv(n, 16)}, {k // 64}, 32, 4] for x's K={k} (a multiple of 64)"
                         f" and N={n} rows of scales, got {tuple(words.shape)} {words.dtype}")
    if k % group_size or group_size % 64:
        raise ValueError(f"the words hold whole 64-feature chunks: group_size must be a multiple of 64 dividing K={k}, got {group_size}")
    _check_scales_and_zeros(x, scales, zeros, n, group_size)
    y, path = _output_and_path(x, n, bias, None, config)
    if path is None:
        return y
    shape = (m, n, k, group_size)
    if path == "gemv":
        cfg = {**int4_tc_default_config(n, k, group_size), **(config or {})}
        if cfg.get("KERNEL") != "tc" or tc_scales is None:
            raise ValueError(f"a weight kept as tensor-core words runs the GEMV KERNEL='tc' with its (s, z) pairs (tc_scales); got KERNEL={cfg.get('KERNEL')!r},"
                             f" tc_scales {'given' if tc_scales is not None else 'missing'}: use path 'tiled'")
        _check_int4_gemv_config(cfg, group_size, k)
        _int4_tc_gemv(x, n, group_size, bias, y, cfg, (words, tc_scales))
        return y
    cfg = {**int4_tiled_default_config(shape, x.dtype), **(config or {}), "TC_WORDS": True}
    _check_words_step(cfg)
    _int4_tiled(x, words, n, scales, zeros, group_size, bias, y, cfg)
    return y


def _int4_tiled(x, weight, n, scales, zeros, group_size, bias, y, cfg) -> None:
    """The tiled int4 kernel over `weight`: the packed bytes [N, K/2], or the words with TC_WORDS."""
    m, k = x.shape
    _positive_pow2(cfg, "BLOCK_M", "BLOCK_N", "BLOCK_K")
    _check_int4_block_k(cfg["BLOCK_K"], group_size, "tiled")
    if min(cfg["BLOCK_M"], cfg["BLOCK_N"]) < 16:
        raise ValueError(f"tiled path: BLOCK_M and BLOCK_N must be >= 16 (tl.dot), got {cfg}")
    grid = (_cdiv(m, cfg["BLOCK_M"]) * _cdiv(n, cfg["BLOCK_N"]),)
    w_strides = (weight.stride(0), weight.stride(1)) if weight.dim() == 2 else (0, 0)  # the words' strides are compiled in
    _jit(_int4_tiled_kernel)[grid](
        x, weight, scales, zeros, bias if bias is not None else scales, y,
        m, n, k,
        x.stride(0), x.stride(1), *w_strides,
        scales.stride(0), scales.stride(1), zeros.stride(0), zeros.stride(1), y.stride(0), y.stride(1),
        GROUP_SIZE=group_size, HAS_BIAS=bias is not None, DOT_PRECISION=_dot_precision(x.dtype),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg.get("GROUP_M", 8),
        **({"TC_WORDS": True} if cfg.get("TC_WORDS") else {}), **_launch_options(cfg),
    )


def _tiled_weight(w_packed: torch.Tensor, cfg: dict[str, Any], tc_operands) -> torch.Tensor:
    """The tiled kernel's weight: the packed bytes, or with config TC_WORDS the tensor-core GEMV's
    words (`tc_operands`' first, made and cached on `w_packed` when absent), read as W^T tiles
    of whole 16-row tiles and 64-feature chunks."""
    if not cfg.get("TC_WORDS"):
        return w_packed
    _check_words_step(cfg)
    return tc_operands[0] if tc_operands is not None else _int4_tc_words(w_packed)


def _check_words_step(cfg: dict[str, Any]) -> None:
    """The tiled kernel over the words reads whole 64-feature chunks (BLOCK_N: a power of two >= 16
    already, whole 16-row tiles)."""
    if cfg["BLOCK_K"] % 64:
        raise ValueError(f"int4 tiled path with TC_WORDS reads whole 64-feature chunks of the words: BLOCK_K must be a multiple of 64, got {cfg['BLOCK_K']}")


# ============================================================================================
# Part 3: quantisers, packing and PyTorch references
# ============================================================================================


def quantize_int8_per_channel(w: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] -> (q [N, K] int8, scales [N] in `dtype`, default W's): the int8 format (`formats.quantize_int8_rowwise`)."""
    return quantize_int8_rowwise(w, dtype)


def quantize_int4_groupwise(w: torch.Tensor, group_size: int, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W [N, K] -> (packed [N, K/2] uint8, scales [N, K/G], zeros [N, K/G] in `dtype`, default W's):
    the int4 format's codes (`formats.quantize_int4_codes`, tinygemm's form, as the int4 transform
    quantises), packed low first for these kernels."""
    if group_size < 2 or group_size % 2:
        raise ValueError(f"group_size must be a positive even integer, got {group_size}")
    codes, scales, zeros = quantize_int4_codes(w, group_size, dtype)  # [N, K] uint8, [N, K/G] twice
    return pack_int4(codes), scales, zeros


def _ref_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def int8_reference(x: torch.Tensor, w_int8: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ (w_int8 * scales[:, None])^T + bias, dequantised in float64 (x float64) or float32; x's dtype out."""
    dt = _ref_dtype(x)
    y = x.to(dt) @ (w_int8.to(dt) * scales.to(dt)[:, None]).t()  # [M, N]
    if bias is not None:
        y = y + bias.to(dt)
    return y.to(x.dtype)


def int4_reference(x: torch.Tensor, w_packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W'^T + bias with W' = int4_dequantize(...) in float64 (x float64) or float32; x's dtype out."""
    dt = _ref_dtype(x)
    y = x.to(dt) @ int4_dequantize(w_packed, scales, zeros, group_size, dt).t()  # [M, N]
    if bias is not None:
        y = y + bias.to(dt)
    return y.to(x.dtype)


# ============================================================================================
# Part 4: configuration spaces and KernelSpecs
# ============================================================================================

_SMS = 132  # H100 SXM: the split-K heuristics aim for a few programs per SM
_MAX_ACC_PER_THREAD = 128  # GEMV: fp32 products per thread per step ([BM, BN, BK] / threads)


def _split_ks(n_blocks: int, steps: int) -> list[int]:
    """SPLIT_K values worth trying: 1, and splits that keep at most ~8 programs an SM and 2+ steps each."""
    return [s for s in (1, 2, 4, 8) if s == 1 or (n_blocks * s <= 8 * _SMS and steps >= 2 * s)]


def _int8_gemv_space(m: int, n: int, k: int) -> list[dict[str, Any]]:
    """BLOCK_N x BLOCK_K tiles from 1 row x 4 KB (long rows in flight) to 32 rows x 256 B, warps,
    and SPLIT_K (fixed up in the kernel) where the output blocks alone would leave SMs idle; the
    loop streamed through shared memory two steps ahead (STAGES 3: 3-5% faster than loads straight
    to registers at every llama-8b shape on the H100, gemv-explore-stages-int8-8b-*.json); programs
    of one step also straight to registers (STAGES 1), summed at once: 4 rows x 2048 won
    32000x2048 (23.26 us) and 2 x 4096 won 14336x4096 (20.88 against 21.46) under PDL
    (kernels-gemv-pdl-int8-*-2026-11-22.json)."""
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


# the row kernel with steps of several groups, (BLOCK_N, BLOCK_K, num_warps, VEC, split-K too, PREFETCH):
# the shapes that won on the H100 (gemv-explore-rows-groups-*.json, gemv-explore-rows-prefetch2-*.json):
# llama-1b 256x2048 2.5 us (2 rows x the whole row a step) against 3.4 for 4 rows x 1024, 2048x5632 7.5
# (PREFETCH 2) against 8.3 (1), 32000x2048 17.0 against 18.3; llama-8b 128256x4096 110.8 against
# 115.9, 4096x14336 19.0 against 20.9 (split 4), 4096x4096 8.8 against 9.2 (split 4); 2048x2048 4.0
# (8 rows x 2048 a step) against 4.3 (gemv-explore-rows-short-*.json); 256x2048 2.23 (1 row on 8 warps)
# against 2.29 (gemv-explore-rows-warps8-*.json)
_MULTI_GROUP_ROWS = ((1, 2048, 8, 2, False, 1), (2, 2048, 4, 4, False, 1), (8, 2048, 4, 4, False, 1), (4, 1024, 1, 4, False, 2), (4, 1024, 2, 4, False, 1), (8, 1024, 4, 4, False, 1),
                     (32, 256, 2, 2, True, 2), (64, 256, 2, 2, True, 2), (64, 256, 4, 2, True, 2), (32, 512, 4, 2, True, 2))


def _int4_gemv_space(m: int, n: int, k: int, group: int) -> list[dict[str, Any]]:
    """M == 1: the row kernel (a group, up to 256 codes, per row per step; 8 to 16 words a thread;
    two words a lane; the next step's words prefetched, or all its reads (PREFETCH 2); and steps of
    several groups, _MULTI_GROUP_ROWS) and the word kernel at its best shape (it no longer wins
    beside them); M > 1: the byte kernel and, for 16-bit activations up to 16 rows, the MMA
    kernel over bytes. M <= 8 with 16-bit activations: the tensor-core kernel over pre-shuffled
    weights too (`_int4_tc_space`; the default at batch 1 from 1024 outputs)."""
    out = []
    if m == 1 and k % 8 == 0:
        bk = max((b for b in (16, 32, 64, 128, 256) if group % b == 0), default=0)
        for bn, nw in itertools.product((32, 64, 128), (1, 2, 4, 8)):  # 256 rows never won
            if bk and bn <= n and 8 <= bn * (bk // 8) // (32 * nw) <= 16:  # words a thread holds per step
                for split, prefetch in itertools.product(_split_ks(_cdiv(n, bn), k // bk), (1, 2)):
                    out.append({"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": nw, "num_stages": 1, "VEC": 2, "PREFETCH": prefetch})
        for bn, block_k, nw, vec, splits, prefetch in _MULTI_GROUP_ROWS:  # long steps; 2048 features only as whole rows (where they won)
            if _groups_a_step(block_k, group, k) > 1 and bn <= n and (block_k < 2048 or block_k == k):
                for split in [s for s in _split_ks(_cdiv(n, bn), k // block_k) if s <= 4] if splits else (1,):
                    out.append({"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": block_k, "SPLIT_K": split, "num_warps": nw, "num_stages": 1, "VEC": vec, "PREFETCH": prefetch})
                if block_k == k and bn >= 4:  # whole rows in one step through cp.async: 2048x2048 3.05 us against 3.68; 1-2 rows no gain (gemv-explore-rows-stages-short-*.json)
                    out.append({"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": block_k, "SPLIT_K": 1, "num_warps": nw, "num_stages": 1, "VEC": vec, "PREFETCH": 0, "STAGES": 3})
        word_k = min(bk, 128)
        for split in _split_ks(_cdiv(n, 64), k // word_k) if bk else ():  # no longer winning beside the row kernel: its best shape only
            out.append({"KERNEL": "words", "BLOCK_N": 64, "BLOCK_K": word_k, "SPLIT_K": split, "num_warps": 4, "num_stages": 1, "PREFETCH": False, "STAGES": 1})
        return out + _int4_tc_space(m, n, k, group)
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
    return out + _int4_tc_space(m, n, k, group)


# the tensor-core GEMV's shapes (BLOCK_N, BLOCK_K, num_warps) that won on the H100 at llama shapes
# (gemv-explore-tc-chunks-*.json: one 16-row tile a warp, steps of 2 to 8 chunks, split along K)
_TC_SHAPES = ((64, 128, 4), (64, 256, 4), (64, 512, 4), (64, 512, 2), (128, 128, 8), (128, 256, 8))
# and small programs (one or two warps, 1-4 tiles a warp) in multi-wave grids, the next kernel let in at the wait (PDL
# "wait": its programs take the slots ours free): at 14336x4096 on the H100, BN16 BK128 S4 on 1 warp took 12.75 us and
# BN32 BK256 S4 on 1 warp 12.93 at the wait against 14.11 after the loop, the tuned 13.33 (gemv-explore-tc-narrow*-*.json)
_TC_NARROW = ((16, 128, 1), (32, 256, 1), (64, 256, 2))


def _tc_held_shapes(m: int, n: int, k: int, group: int) -> list[tuple[int, int, int]]:
    """(BLOCK_K, SPLIT_K, num_warps) of the tensor-core GEMV's held configs at this shape: one 16-row tile
    a program, its warps splitting K (WARP_K), one step a program (BLOCK_K = K / SPLIT_K: with PREFETCH
    every word read before the PDL wait, no loop), 8-16 chunks a warp (~210 registers: two four-warp
    or four two-warp programs an SM), where the grid is resident in one wave (a second wave would
    read after the kernel before it ended). On the H100 at 4096x4096: BK4096 S1 on 4 warps 5.19 us
    against the tuned 5.53; 8 warps of 8 chunks 6.52 (ab-int4-tc-warp-k-held-*.json). At 14336x4096
    (3.4 waves) 13.62 against 12.10, hence the one-wave rule."""
    if m > 8 or k % 64 or group % 64:
        return []
    out = []
    for split, nw in ((1, 2), (1, 4), (2, 2), (2, 4)):
        bk = k // split
        chunks = bk // (64 * nw)
        if (k % split == 0 and bk & (bk - 1) == 0 and 8 <= chunks <= _TC_WARP_K_CHUNKS and _groups_a_step(bk, group, k)
                and _cdiv(n, 16) * split <= (8 // nw) * _SMS):
            out.append((bk, split, nw))
    return out


def _int4_tc_space(m: int, n: int, k: int, group: int) -> list[dict[str, Any]]:
    """KERNEL 'tc' for M <= 8 (16-bit activations only: `int4_gemv_configs` drops it for fp32), the
    next step's reads prefetched, split along K as for the other GEMVs. Steps of 128 features also
    come with ptxas's register cap raised to 128: uncapped, ptxas sinks the prefetching loads below
    the MMAs to save registers (sm_90 code from Triton 3.6); capped, they stay ahead at ~100
    registers (sass-loop-tc-maxnreg-*.jsonl; on the H100: 4096x4096 in 7.5 against 8.0 us,
    gemv-explore-tc-maxnreg-*.json)."""
    out = []
    if m > 8 or k % 64 or group % 64:
        return out
    tc = lambda bn, bk, split, nw, **extra: {"KERNEL": "tc", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": nw, "num_stages": 1,
                                             "PREFETCH": True, **extra}
    for bn, bk, nw in _TC_SHAPES:
        if _groups_a_step(bk, group, k):
            for split in [s for s in (1, 2, 4, 8) if s == 1 or (_cdiv(n, bn) * s <= 8 * _SMS and k // bk >= s)]:  # a split may take one step
                for cap in (0, 128) if bk == 128 else (0,):
                    out.append(tc(bn, bk, split, nw, **({"maxnreg": cap} if cap else {})))
    out += [tc(16, bk, split, nw, WARP_K=True, PDL="wait") for bk, split, nw in _tc_held_shapes(m, n, k, group)]
    for bn, bk, nw in _TC_NARROW:  # split 2-8 (unsplit, 14.7-15.0 us at 14336x4096), up to 32 one-warp (16 two-warp) programs an SM
        if _groups_a_step(bk, group, k):
            for split in [s for s in (2, 4, 8) if _cdiv(n, bn) * s * nw <= 32 * _SMS and k // bk >= s]:
                for x_now in (False, True) if bn > 16 else (False,):
                    out.append(tc(bn, bk, split, nw, PDL="wait", **({"X_NOW": True} if x_now else {})))
    return out


def _tiled_configs(m: int, n: int, k: int, group: int | None) -> list[dict[str, Any]]:
    """Tutorial 03's Hopper/Ampere list, trimmed to tiles that M and the group size allow."""
    base = (
        (128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 128, 64, 8, 3),
        (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (64, 128, 64, 4, 3), (64, 64, 64, 4, 3),
        (32, 64, 32, 4, 5), (32, 128, 64, 4, 3), (16, 64, 64, 4, 3), (16, 128, 128, 4, 3),
    )
    cap = max(16, pow2_bucket(m))
    out = []
    for bm, bn, bk, nw, ns in base:
        if bm > cap:
            continue
        if group is not None and (group % bk or bk < 32):
            continue
        out.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": nw, "num_stages": ns})
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


def int4_gemv_configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    m, n, k, g = shape[:4]
    configs = _int4_gemv_space(m, n, k, g)
    return [c for c in configs if c["KERNEL"] not in ("mma", "tc") or dtype != torch.float32]


def int4_gemv_default_config(shape: tuple[int, ...], dtype: torch.dtype, tensor_cores: bool = True) -> dict[str, Any]:
    """M == 1 (the H100's best at llama shapes, gemv-explore-rows-prefetch2-*.json, gemv-explore-tc-chunks-*.json):
    rows of 2048 codes, up to 2048 of them, in one step (1 row on eight warps under 1024 outputs, else
    8 rows through cp.async); under 1024 outputs, 2 rows x a whole row of up to 2048 codes a step on four warps; otherwise, for
    16-bit activations and unless `tensor_cores` is False (no pre-shuffled operands at hand), the
    tensor-core kernel (`int4_tc_default_config`); else the row kernel with two groups a step and all of
    the next step's reads prefetched, 64 rows a program when those alone fill the device (four
    warps), else 32 rows, split along K while the programs stay under ~4 an SM (two warps); the word
    kernel for fewer than 64 rows. M > 1: the byte kernel."""
    m, n, k, g = shape[:4]
    if m == 1 and k % 8 == 0 and g % 16 == 0:
        bk = max(b for b in (16, 32, 64, 128, 256) if g % b == 0)
        if n < 64:
            blocks, split = _cdiv(n, 16), 1
            while split < 8 and blocks * split * 2 <= 8 * _SMS and k // bk >= 4 * split:
                split *= 2
            return {"KERNEL": "words", "BLOCK_N": 16, "BLOCK_K": min(bk, 128), "SPLIT_K": split, "num_warps": 4, "num_stages": 1}
        whole = [b for b in (2048, 1024) if _groups_a_step(b, g, k) > 1]
        if whole and whole[0] == k == 2048 and n <= 2048:  # the whole row one step (kernels-gemv-fair-1b-short-*.json)
            if n < 1024:  # a row a program on eight warps: 256x2048 2.22 us
                return {"KERNEL": "rows", "BLOCK_N": 1, "BLOCK_K": k, "SPLIT_K": 1, "num_warps": 8, "num_stages": 1, "VEC": 2, "PREFETCH": 1}
            # eight rows a program through cp.async: 2048x2048 3.04 us, the tensor-core kernel's 5.3
            return {"KERNEL": "rows", "BLOCK_N": 8, "BLOCK_K": k, "SPLIT_K": 1, "num_warps": 4, "num_stages": 1, "VEC": 4, "PREFETCH": 0, "STAGES": 3}
        if n < 1024 and whole:  # few outputs: many programs of short rows, one or two steps each
            return {"KERNEL": "rows", "BLOCK_N": 2, "BLOCK_K": whole[0], "SPLIT_K": 1, "num_warps": 4, "num_stages": 1, "VEC": 4, "PREFETCH": 1}
        if tensor_cores and dtype in (torch.float16, torch.bfloat16) and k % 64 == 0 and g % 64 == 0:
            return int4_tc_default_config(n, k, g)
        if bk == g and 2 * g <= 256 and _groups_a_step(2 * g, g, k) == 2:
            bk *= 2  # two groups a step
        bn = 64 if _cdiv(n, 64) >= _SMS else 32
        blocks, split = _cdiv(n, bn), 1
        while split < 4 and blocks * split * 2 <= 4 * _SMS and k // bk >= 4 * split:
            split *= 2
        return {"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4 if bn == 64 and split == 1 else 2,
                "num_stages": 1, "VEC": 2, "PREFETCH": 2}
    bk = max(b for b in (2, 4, 8, 16, 32, 64, 128) if g % b == 0)  # the largest divisor of G up to 128
    bn = 32 if m <= 2 else 16
    blocks = _cdiv(n, bn)
    split = 1
    while blocks * split * 2 <= 2 * _SMS and _cdiv(k, bk) >= 4 * split:
        split *= 2
    return {"KERNEL": "bytes", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4, "num_stages": 3}


def int4_tc_default_config(n: int, k: int, g: int) -> dict[str, Any]:
    """The tensor-core GEMV at batch 1 (the H100's best, gemv-explore-tc-chunks-*.json): 64 rows a
    program; when those alone fill the device, two warps and steps of up to 512 features, else four
    warps, steps of up to 256 and split along K up to ~8 programs an SM."""
    blocks = _cdiv(n, 64)
    fill = blocks >= 2 * _SMS
    bk = next(b for b in ((512, 256, 128, 64) if fill else (256, 128, 64)) if _groups_a_step(b, g, k))
    split = 1
    while not fill and split < 8 and blocks * split * 2 <= 8 * _SMS and k // bk >= 4 * split:
        split *= 2
    return {"KERNEL": "tc", "BLOCK_N": 64, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 2 if fill else 4, "num_stages": 1, "PREFETCH": True}


def int8_tiled_configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    m, n, k = shape[:3]
    return _tiled_configs(m, n, k, None)


def int8_tiled_default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    m = shape[0]
    bm = 128 if m > 64 else 64 if m > 32 else 32 if m > 16 else 16
    return {"BLOCK_M": bm, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4 if bm <= 64 else 8, "num_stages": 3}


def int4_tiled_configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    """The tiled list over the packed bytes and, where the group size allows 64-feature steps, each
    such tile again over the tensor-core words (TC_WORDS: 1.3-3.4x faster on the H100 at batch 32
    and 512 of llama-8b's shapes, ab-int4-tiled-words-*.json)."""
    m, n, k, g = shape[:4]
    packed = _tiled_configs(m, n, k, g)
    return packed + [{**c, "TC_WORDS": True} for c in packed if c["BLOCK_K"] % 64 == 0]


def int4_tiled_default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    """Tiles over the tensor-core words in steps of 128 features (64 where the group size needs it;
    the fastest measured on the H100, ab-int4-tiled-words-*.json), else the packed bytes."""
    cfg = int8_tiled_default_config(shape, dtype)
    g = shape[3]
    if g % 64:
        return {**cfg, "BLOCK_K": 32}
    return {**cfg, "BLOCK_K": 128 if g % 128 == 0 else 64, "TC_WORDS": True}


def _make_int8_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
    m, n, k = shape[:3]
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen, device="cpu") / k**0.5  # [N, K] fp32, Linear-like magnitudes
    q, scales = quantize_int8_per_channel(w, dtype)
    x = torch.randn(m, k, generator=gen, device="cpu").to(dtype)
    bias = (torch.randn(n, generator=gen, device="cpu") * 0.1).to(dtype)
    return x.to(device), q.to(device), scales.to(device), bias.to(device)


def _make_int4_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
    m, n, k, g = shape[:4]
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen, device="cpu") / k**0.5
    packed, scales, zeros = quantize_int4_groupwise(w, g, dtype)
    x = torch.randn(m, k, generator=gen, device="cpu").to(dtype)
    bias = (torch.randn(n, generator=gen, device="cpu") * 0.1).to(dtype)
    return x.to(device), packed.to(device), scales.to(device), zeros.to(device), g, bias.to(device)


def _decode_inputs(make):
    """`make`'s inputs without the bias: the decode GEMVs are tuned and benchmarked at llama's
    projections, which have none (nor do the peers they are timed against). Tests pass their own."""
    def inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
        return (*make(shape, dtype, device, seed)[:-1], None)

    return inputs


def _elt(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _int8_bytes(shape: tuple[int, ...], dtype: torch.dtype, bias: bool = True) -> float:
    m, n, k = shape[:3]
    e = _elt(dtype)
    return float(n * k + n * e + bias * n * e + m * k * e + m * n * e)  # weight, scales, bias, x, y


def _int4_bytes(shape: tuple[int, ...], dtype: torch.dtype, bias: bool = True) -> float:
    m, n, k, g = shape[:4]
    e = _elt(dtype)
    return float(n * k // 2 + 2 * n * (k // g) * e + bias * n * e + m * k * e + m * n * e)  # weight, scales + zeros, bias, x, y


def _flops(shape: tuple[int, ...]) -> float:
    m, n, k = shape[:3]
    return 2.0 * m * n * k


def _bucket(shape: tuple[int, ...]) -> str:
    m, n, k = shape[:3]
    tail = f"_G{shape[3]}" if len(shape) > 3 else ""
    return f"M{pow2_bucket(m)}_N{n}_K{k}{tail}"


def _gemv_bucket(shape: tuple[int, ...]) -> str:
    """The int8 GEMV's buckets: "v4" since its shape is compiled in (older tunings timed the runtime-shape kernel)."""
    return _bucket(shape) + "_v4"


def _int4_gemv_bucket(shape: tuple[int, ...]) -> str:
    """int4 GEMV: "v15" where the tensor-core kernel's held configs (`_tc_held_shapes`) joined the space, "v14" elsewhere, since the tensor-core configs' refinements hold the cooperative grid's one-round-trip split-K
    fix-up (FIXUP "wait", `_int4_refinements`); v13: tensor-core configs of small programs let the next kernel in at the wait (`_TC_NARROW`;
    v12: the row kernel's whole-row steps through cp.async (STAGES 3) and 1 row on 8 warps; v11: whole-row steps of 2048
    features; v10: the row and tensor-core kernels compile K in)."""
    m, n, k = shape[:3]
    held = len(shape) > 3 and bool(_tc_held_shapes(m, n, k, shape[3]))
    return _bucket(shape) + ("_v15" if held else "_v14")


def _int4_tiled_bucket(shape: tuple[int, ...]) -> str:
    """int4 tiled: "v2" since tiles over the tensor-core words (TC_WORDS) joined the space."""
    return _bucket(shape) + "_v2"


def _with_path(fn, path: str):
    def launch(*inputs, config: dict[str, Any] | None = None):
        return fn(*inputs, config={**(config or {}), "path": path})

    launch.__name__ = f"{fn.__name__}_{path}"
    return launch


def _int4_refinements(config: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    """The int4 GEMV's refinements (`KernelSpec.refinements`): `pdl_trigger_refinements` for the
    kernels that launch with PDL (rows, tc); for the tensor-core kernel with its prefetch on the GPU,
    also x read in the step that uses it over steps of at least 256 features with the register cap at
    128 (X_NOW: the registers x held a step ahead carry twice the words instead; on the H100 4.9-6.5%
    faster at 14336x4096, 4096x14336 and 32000x2048, slower at 4096x4096 and 128256x4096:
    ab-int4-tc-x-now-*.json). For a split tensor-core config on the GPU, also it and its trigger variant
    with the one-round-trip fix-up of a cooperative grid (FIXUP "wait": on the H100 12.67 -> 12.01 us
    for 14336x4096's BN16 S4 one-warp programs, 13.1 against 12.8 for 4096x14336's eight-warp ones,
    fixup-cost-coop-*.json; a grid too large to be resident at once fails and is skipped). A variant
    that cannot run at the shape fails its check and is skipped."""
    out = pdl_trigger_refinements(config, device) if config.get("KERNEL") in ("rows", "tc") else []
    if config.get("KERNEL") == "tc" and config.get("SPLIT_K", 1) > 1 and config.get("FIXUP", "count") == "count" and device.type == "cuda":
        out += [{**c, "FIXUP": "wait"} for c in (config, *out)]
    if config.get("KERNEL") == "tc" and config.get("PREFETCH") and not config.get("X_NOW") and device.type == "cuda":
        out.append({**config, "X_NOW": True, "BLOCK_K": max(256, config["BLOCK_K"]), "maxnreg": 128})
    return out


def _int4_launch(path: str):
    def launch(x, w_packed, scales, zeros, group_size, bias=None, config: dict[str, Any] | None = None):
        return int4_weight_only_matmul(x, w_packed, scales, zeros, group_size, bias, config={**(config or {}), "path": path})

    launch.__name__ = f"int4_weight_only_matmul_{path}"
    return launch


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

for _path, _configs, _default in (("gemv", int4_gemv_configs, int4_gemv_default_config), ("tiled", int4_tiled_configs, int4_tiled_default_config)):
    register_kernel(
        KernelSpec(
            name=f"int4_{_path}",
            configs=_configs,
            default_config=_default,
            launch=_int4_launch(_path),
            reference=int4_reference,
            make_inputs=_decode_inputs(_make_int4_inputs) if _path == "gemv" else _make_int4_inputs,
            flops=_flops,
            bytes=functools.partial(_int4_bytes, bias=False) if _path == "gemv" else _int4_bytes,
            bucket=_int4_gemv_bucket if _path == "gemv" else _int4_tiled_bucket,
            refinements=_int4_refinements if _path == "gemv" else None,
        )
    )

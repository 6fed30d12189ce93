"""Batch-1 int4 GEMVs over the packed codes read as 32-bit words (config KERNEL "rows", "words").

The int4 format is `formats`' (W'[n, k] = (q - 8) * s[n, g] + z[n, g], codes packed low first), read
as little-endian int32 words: word j of a row holds codes 8j..8j + 7 at bits 4i. Codes become
floats without conversion instructions (I2F runs at a quarter of the FMA rate and would bound a
GEMV near memory speed): a code masked into the mantissa of a power of two is that power plus the
code, exactly.

* "rows" (`_int4_gemv_rows_kernel`, the default at batch 1 for fp32 activations and under 1024
  outputs): a lane holds VEC words of each of several rows, so the x values of its words serve all
  of them; one lop3 and one FMA a code (about 4 instructions a code in the compiled loop,
  `tests/sass_loop.py`). PREFETCH 2 requests all of the next step's reads (words, x, scales,
  zeros) a step ahead; a step may span several groups.
* "words" (`_int4_gemv_words_kernel`): the earlier word kernel, about five to six instructions a
  code, kept in the configuration space at its best shape.

Split-K is fixed up in the kernel (`split_k`). Parts: the kernels, the host launcher
`_int4_batch1_gemv` (called by `int4.int4_weight_only_matmul`), the configuration space, which
`int4`'s KernelSpec "int4_gemv" joins to the other GEMVs'; the reference is `int4.int4_reference`.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from agnitra.kernels._triton import device_helper, jit_kernel, tl
from agnitra.kernels.pdl import _pdl_trigger, _pdl_wait, pdl_options  # noqa: F401 - _pdl_*: device helpers the kernel calls
from agnitra.kernels.quant.common import _cdiv, _groups_a_step, _launch_options, _split_ks, _stages
from agnitra.kernels.quant.split_k import _gemv_bias, _split_k_buffers, _store_gemv_vector  # noqa: F401 - device helpers the kernels call


# ============================================================================================
# Part 1: Triton kernels
# ============================================================================================


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


@device_helper
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
    rows (tests/sass_loop.py counts the compiled loop). Code i sits at bit b_i of w << 11, w or w >> 9 (b = 11, 15, 19,
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


# ============================================================================================
# Part 2: host launcher
# ============================================================================================


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
    jit_kernel(fn)[grid](
        x, words, scales, zeros, bias if bias is not None else scales, y, partials, counters,
        n, k, x.stride(1), *row_stride,
        scales.stride(0), scales.stride(1), zeros.stride(0), zeros.stride(1), y.stride(1),
        GROUP_SIZE=group_size, HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_W=block_k // 8, SPLIT_K=split_k,
        PREFETCH=prefetch, STAGES=_stages(cfg), **extra, **_launch_options(cfg), **(pdl_options(x, cfg) if rows else {}),
    )


# ============================================================================================
# Part 3: configuration space
# ============================================================================================


# the row kernel with steps of several groups, (BLOCK_N, BLOCK_K, num_warps, VEC, split-K too, PREFETCH):
# the shapes that won on the H100 at llama-1b and llama-8b shapes (docs/kernels.md)
_MULTI_GROUP_ROWS = ((1, 2048, 8, 2, False, 1), (2, 2048, 4, 4, False, 1), (8, 2048, 4, 4, False, 1), (4, 1024, 1, 4, False, 2), (4, 1024, 2, 4, False, 1), (8, 1024, 4, 4, False, 1),
                     (32, 256, 2, 2, True, 2), (64, 256, 2, 2, True, 2), (64, 256, 4, 2, True, 2), (32, 512, 4, 2, True, 2))


def _int4_rows_space(n: int, k: int, group: int) -> list[dict[str, Any]]:
    """Batch 1 (K % 8 == 0): the row kernel (a group, up to 256 codes, per row per step; 8 to 16 words
    a thread; two words a lane; the next step's words prefetched, or all its reads (PREFETCH 2);
    and steps of several groups, _MULTI_GROUP_ROWS) and the word kernel at its best shape (it no
    longer wins beside them)."""
    out = []
    bk = max((b for b in (16, 32, 64, 128, 256) if group % b == 0), default=0)
    for bn, nw in itertools.product((32, 64, 128), (1, 2, 4, 8)):  # 256 rows never won
        if bk and bn <= n and 8 <= bn * (bk // 8) // (32 * nw) <= 16:  # words a thread holds per step
            for split, prefetch in itertools.product(_split_ks(_cdiv(n, bn), k // bk), (1, 2)):
                out.append({"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": nw, "num_stages": 1, "VEC": 2, "PREFETCH": prefetch})
    for bn, block_k, nw, vec, splits, prefetch in _MULTI_GROUP_ROWS:  # long steps; 2048 features only as whole rows (where they won)
        if _groups_a_step(block_k, group, k) > 1 and bn <= n and (block_k < 2048 or block_k == k):
            for split in [s for s in _split_ks(_cdiv(n, bn), k // block_k) if s <= 4] if splits else (1,):
                out.append({"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": block_k, "SPLIT_K": split, "num_warps": nw, "num_stages": 1, "VEC": vec, "PREFETCH": prefetch})
            if block_k == k and bn >= 4:  # whole rows in one step through cp.async (1-2 rows a program gained nothing)
                out.append({"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": block_k, "SPLIT_K": 1, "num_warps": nw, "num_stages": 1, "VEC": vec, "PREFETCH": 0, "STAGES": 3})
    word_k = min(bk, 128)
    for split in _split_ks(_cdiv(n, 64), k // word_k) if bk else ():  # no longer winning beside the row kernel: its best shape only
        out.append({"KERNEL": "words", "BLOCK_N": 64, "BLOCK_K": word_k, "SPLIT_K": split, "num_warps": 4, "num_stages": 1, "PREFETCH": False, "STAGES": 1})
    return out

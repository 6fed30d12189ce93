"""int4 GEMV on tensor cores for batch 1..8 (config KERNEL "tc"; 16-bit activations; the default at
batch 1 from 1024 outputs).

The weight is pre-shuffled once (`shuffle_int4_for_tc`, cached on the weight tensor or made ahead by
the module that owns it: `int4_tc_operands`) so that each lane's 16-byte load is its A fragments of
four mma.m16n8k16. Inline PTX (`_INT4_TC_TILE`) turns code pairs into exact 16-bit MAGIC + q (one
lop3 a register) and issues the MMAs with x as B (batch rows padded to the MMA's 8 columns; a
lane's x pairs are its B fragments as loaded). The group's scale and zero, pre-arranged as (s, z)
pairs so that a lane's two C rows are one 8-byte load (`_int4_tc_scales`), apply to the fp32 sums,
MAGIC + 8 taken off through the x sums (`_INT4_TC_XSUM`), so the weight is never rounded. No
shared memory in the loop. The PTX is right only in the words' load layout:
`test_int4_tc_asm_layout` compiles it for sm_90 and checks; under the interpreter the MMAs are
emulated from the PTX ISA's fragment layouts (`_int4_tc_emulated`).

A program owns TILES 16-row tiles, one a warp or several (`_TC_NARROW`: small programs in
multi-wave grids that let the next kernel in at their PDL wait). WARP_K: the warps split each
step's features instead of the tiles, their sums met in shared memory after the loop; with one
step a program (`_tc_held_shapes`) every word is read before the PDL wait and held, no split-K
fix-up. Split-K is fixed up in the kernel, by the counter or, for a grid launched cooperatively,
by the waiting split (config FIXUP "wait", `split_k`).

Four parts: the PTX, its emulation and the kernel; the weight shuffle and the host wrapper
`_int4_tc_gemv` (called by `int4.int4_weight_only_matmul` and `int4.int4_words_matmul`); the
PyTorch reference is `int4.int4_reference`; the configuration space, which `int4`'s KernelSpec
"int4_gemv" joins to the other GEMVs'.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from agnitra.kernels._triton import device_helper, jit_kernel, tl
from agnitra.kernels.pdl import _pdl_trigger, _pdl_wait, pdl_options  # noqa: F401 - _pdl_*: device helpers the kernel calls
from agnitra.kernels.quant.common import _SMS, _cdiv, _groups_a_step, _launch_options, _ptx, _stages
from agnitra.kernels.quant.formats import pack_int4, unpack_int4
from agnitra.kernels.quant.split_k import _gemv_bias, _split_k_buffers, _split_k_total, _split_k_total_waiting, reserve_split_k_slots  # noqa: F401 - device helpers too
from agnitra.kernels.spec import interpreting


# ============================================================================================
# Part 1: inline PTX, its emulation, the Triton kernel
# ============================================================================================


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
# codes, the MMA included (twelve with a packed FMA to q - 8 first).
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


@device_helper
def _tc_x_matrix(b0, b1, HALF: tl.constexpr):
    """The x pairs b0, b1 [1, 128] (element 4 lane + c: pairs 8t + c, 8t + 4 + c) as the MMAs' B, the matrix
    x [8 batch rows, 64 features] (the PTX ISA's layout): MMA j's register e is pair 8t + 2j + e."""
    xb = tl.reshape(tl.join(b0, b1), (8, 4, 2, 2, 2))  # [g = n, t, c // 2, e = c % 2, b1]: x pairs
    xb = tl.reshape(tl.permute(xb, (0, 1, 4, 2, 3)), (8, 4, 4, 2))  # [g, t, j = 2 b1 + c // 2, e]
    x_lo = (xb & 0xFFFF).to(tl.int16).to(HALF, bitcast=True).to(tl.float32)
    x_hi = ((xb >> 16) & 0xFFFF).to(tl.int16).to(HALF, bitcast=True).to(tl.float32)
    return tl.reshape(tl.permute(tl.join(x_lo, x_hi), (0, 2, 3, 1, 4)), (8, 64))  # [n, j e t p]


@device_helper
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


@device_helper
def _tc_load(ptrs, FLIP: tl.constexpr, EVICT: tl.constexpr):
    """A load of a [WARPS, ., ., lanes] tensor of the tensor-core GEMV with its warps on dim 0: FLIP (Triton
    3.7+, which breaks ties between equally contiguous dims from the last one: `tc_flip`) loads it with
    dims 0 and 2 swapped and swaps them back, so the warps never land on dim 2 (the chunks, summed in registers)."""
    if FLIP:
        return tl.permute(tl.load(tl.permute(ptrs, (2, 1, 0, 3)), eviction_policy=EVICT), (2, 1, 0, 3))
    return tl.load(ptrs, eviction_policy=EVICT)


@device_helper
def _tc_weights(w_ptrs, sz_ptrs, k, GROUP_SIZE: tl.constexpr, FLIP: tl.constexpr = False):
    """The tensor-core GEMV's weight reads for the step at feature k (< K): its words, read once (evicted
    first), and (s, z) pairs, read again by other steps of the group (evicted last). Written by nobody
    during a model's run: under PDL they may be read before the wait."""
    words = _tc_load(w_ptrs + (k // 64) * 128, FLIP, "evict_first")  # k // 64 times 128: a multiple the compiler sees (16-byte loads)
    sz = _tc_load(sz_ptrs + (k // GROUP_SIZE) * 16, FLIP, "evict_last")
    return words, sz


@device_helper
def _tc_x(x_ptrs, k, FLIP: tl.constexpr = False):
    """x's B fragments for the step at feature k (read by every program: evicted last)."""
    chunk = k // 64
    return _tc_load(x_ptrs + chunk * 32, FLIP, "evict_last"), _tc_load(x_ptrs + (chunk * 32 + 4), FLIP, "evict_last")


@device_helper
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
            # a step than masked reads)
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


# ============================================================================================
# Part 2: the weight shuffle and the host wrapper
# ============================================================================================


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
        jit_kernel(_int4_gemv_tc_kernel)[grid](
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
    rather than the first (3.6), so that the warps stay off the chunk dim: unflipped under 3.9 the
    loop of the llama-8b winners has 20-52 CTA barriers a step and half again as many instructions
    (docs/kernels.md; `test_int4_tc_loop_keeps_its_sums_within_warps` checks the loop)."""
    import triton

    return tuple(int(part) for part in triton.__version__.split(".")[:2]) > (3, 6)


def _tc_x_now(cfg: dict[str, Any]) -> dict[str, bool]:
    """Config X_NOW (with PREFETCH only): the tensor-core GEMV reads x in the step that uses it."""
    if not cfg.get("X_NOW"):
        return {}
    if not cfg.get("PREFETCH"):
        raise ValueError("int4 GEMV KERNEL='tc' X_NOW reads x just in time while the words are prefetched: it needs PREFETCH=True")
    return {"X_NOW": True}


def _tc_fixup_wait(cfg: dict[str, Any], split_k: int) -> bool:
    """Config FIXUP: "count" (default: the last of a block's splits to arrive sums them, `_split_k_total`)
    or "wait" (split SPLIT_K - 1 waits for its siblings, `_split_k_total_waiting`; the grid is launched
    cooperatively so that all its programs are resident). True where the launch waits."""
    fixup = cfg.get("FIXUP", "count")
    if fixup not in ("count", "wait"):
        raise ValueError(f"int4 GEMV KERNEL='tc' config FIXUP must be 'count' or 'wait', got {fixup!r}")
    return fixup == "wait" and split_k > 1


# ============================================================================================
# Part 3: configuration space
# ============================================================================================


# the tensor-core GEMV's shapes (BLOCK_N, BLOCK_K, num_warps) that won on the H100 at llama shapes
# (one 16-row tile a warp, steps of 2 to 8 chunks, split along K)
_TC_SHAPES = ((64, 128, 4), (64, 256, 4), (64, 512, 4), (64, 512, 2), (128, 128, 8), (128, 256, 8))
# and small programs (one or two warps, 1-4 tiles a warp) in multi-wave grids, the next kernel let in at the wait (PDL
# "wait": its programs take the slots ours free), faster than the same programs letting it in after the loop
_TC_NARROW = ((16, 128, 1), (32, 256, 1), (64, 256, 2))


def _tc_held_shapes(m: int, n: int, k: int, group: int) -> list[tuple[int, int, int]]:
    """(BLOCK_K, SPLIT_K, num_warps) of the tensor-core GEMV's held configs at this shape: one 16-row tile
    a program, its warps splitting K (WARP_K), one step a program (BLOCK_K = K / SPLIT_K: with PREFETCH
    every word read before the PDL wait, no loop), 8-16 chunks a warp (~210 registers: two four-warp
    or four two-warp programs an SM), where the grid is resident in one wave (a second wave would
    read after the kernel before it ended: at 3.4 waves these were slower than the tuned split programs)."""
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
    registers."""
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
    for bn, bk, nw in _TC_NARROW:  # split 2-8 (unsplit they were slower), up to 32 one-warp (16 two-warp) programs an SM
        if _groups_a_step(bk, group, k):
            for split in [s for s in (2, 4, 8) if _cdiv(n, bn) * s * nw <= 32 * _SMS and k // bk >= s]:
                for x_now in (False, True) if bn > 16 else (False,):
                    out.append(tc(bn, bk, split, nw, PDL="wait", **({"X_NOW": True} if x_now else {})))
    return out


def int4_tc_default_config(n: int, k: int, g: int) -> dict[str, Any]:
    """The tensor-core GEMV at batch 1 (the H100's best at llama shapes): 64 rows a
    program; when those alone fill the device, two warps and steps of up to 512 features, else four
    warps, steps of up to 256 and split along K up to ~8 programs an SM."""
    blocks = _cdiv(n, 64)
    fill = blocks >= 2 * _SMS
    bk = next(b for b in ((512, 256, 128, 64) if fill else (256, 128, 64)) if _groups_a_step(b, g, k))
    split = 1
    while not fill and split < 8 and blocks * split * 2 <= 8 * _SMS and k // bk >= 4 * split:
        split *= 2
    return {"KERNEL": "tc", "BLOCK_N": 64, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 2 if fill else 4, "num_stages": 1, "PREFETCH": True}

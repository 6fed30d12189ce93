"""Weight-only int8 / int4 matmul kernels (agnitra.kernels.quant) under Triton's interpreter.

Tiny shapes that are NOT multiples of the block sizes, each kernel against its float64 reference;
fp32 and fp16 activations (the interpreter's tl.dot is wrong for bf16, so bf16 is checked on the
CPU only for the GEMV paths, which use no tl.dot, and on a GPU by the `gpu` test).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

from agnitra.kernels.quant import common as qcommon  # noqa: E402
from agnitra.kernels.quant import formats as qfmt  # noqa: E402
from agnitra.kernels.quant import int4 as q4  # noqa: E402
from agnitra.kernels.quant import int4_bytes as q4bytes  # noqa: E402
from agnitra.kernels.quant import int4_tc as q4tc  # noqa: E402
from agnitra.kernels.quant import int4_rows as q4rows  # noqa: E402
from agnitra.kernels.quant import int8 as q8  # noqa: E402
from agnitra.kernels.quant import split_k as qsk  # noqa: E402
from agnitra.kernels.quant import tiled as qtiled  # noqa: E402
from agnitra.kernels.autotune import to_float64  # noqa: E402
from agnitra.kernels.spec import KERNELS, get_kernel  # noqa: E402
from agnitra.transforms import quantize as tq  # noqa: E402

pytestmark = pytest.mark.interpreter
ROOT = Path(__file__).resolve().parents[1]

from kernel_device import DEVICE as CPU, ON_GPU, each_config  # noqa: E402 - the CPU, or CUDA with AGNITRA_GPU_TESTS=1
# ||y - ref|| / ||ref|| against float64: fp32 arithmetic, fp16 / bf16 output rounding
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
# the kernels' configurations run with every dtype on the GPU, each with one of them under the interpreter (`each_config`)
ALL_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

# (M, N, K): GEMV shapes (M <= 8) and tiled shapes, none multiples of the blocks
GEMV_SHAPES = [(1, 17, 96), (3, 100, 160), (8, 17, 64), (11, 17, 96)]  # M = 11: two row blocks
TILED_SHAPES = [(33, 100, 96), (3, 17, 160)]
GROUP = 32  # int4 group size for the shape lists above (K in {64, 96, 160} are multiples)


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def _poisoned(m: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full((m, n), float("nan"), dtype=dtype)


def _check(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert torch.isfinite(y).all(), "some outputs were not written (NaN poison left) or are not finite"
    err = _rel_err(y, ref)
    assert err < TOL[dtype], f"relative error {err:.2e} over {TOL[dtype]:.0e}"


def _make_with_bias(name):
    """Inputs of kernel `name` with a bias (the registered GEMV specs make decode inputs, which have none)."""
    return q8._make_int8_inputs if name.startswith("int8") else q4._make_int4_inputs


def _int8_case(shape, dtype, seed=0):
    x, w, s, b = q8._make_int8_inputs(shape, dtype, CPU, seed)
    ref = q8.int8_reference(x.double(), w, s.double(), b.double())  # [M, N] float64
    return (x, w, s, b), ref


def _int4_case(shape, dtype, seed=0):
    x, w, s, z, g, b = q4._make_int4_inputs(shape, dtype, CPU, seed)
    ref = q4.int4_reference(x.double(), w, s.double(), z.double(), g, b.double())
    return (x, w, s, z, g, b), ref


# small blocks keep the interpreter quick and make every test shape a partial block
GEMV_CFG = {"BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 1, "num_warps": 4}
TILED_CFG = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_warps": 4}


# --------------------------------------------------------------------------------------------
# Kernels against their references
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("path,shape", [("gemv", s) for s in GEMV_SHAPES] + [("tiled", s) for s in TILED_SHAPES])
def test_int8_matches_reference(path, shape, dtype):
    (x, w, s, b), ref = _int8_case(shape, dtype)
    cfg = {**(GEMV_CFG if path == "gemv" else TILED_CFG), "path": path}
    y = q8.int8_weight_only_matmul(x, w, s, b, config=cfg, out=_poisoned(shape[0], shape[1], dtype))
    assert y.shape == (shape[0], shape[1]) and y.dtype == dtype
    _check(y, ref, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("path,shape", [("gemv", s) for s in GEMV_SHAPES] + [("tiled", s) for s in TILED_SHAPES])
def test_int4_matches_reference(path, shape, dtype):
    (x, w, s, z, g, b), ref = _int4_case((*shape, GROUP), dtype)
    cfg = {**(GEMV_CFG if path == "gemv" else TILED_CFG), "path": path}
    y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(shape[0], shape[1], dtype))
    _check(y, ref, dtype)


@pytest.mark.parametrize("path,m", [("gemv", 1), ("gemv", 3), ("tiled", 3)])
def test_every_code_dequantises_exactly(path, m):
    """One-hot rows of x pick weight columns: every int8 value (-128..127) and every int4 code
    (0..15, both nibbles) must come back exactly (scale 1, zero 0, fp32)."""
    k, idx = 32, [0, 5, 31][:m]
    x = torch.eye(k)[idx]  # [M, K]
    w8 = ((torch.arange(256)[:, None] + torch.arange(k)[None, :]) % 256 - 128).to(torch.int8)  # [256, K]
    y = q8.int8_weight_only_matmul(x, w8, torch.ones(256), config={"path": path})
    assert torch.equal(y, w8[:, idx].t().float())
    q = (torch.arange(16)[:, None] + torch.arange(k)[None, :]) % 16  # [16, K] codes
    y = q4.int4_weight_only_matmul(x, qfmt.pack_int4(q), torch.ones(16, 1), torch.zeros(16, 1), 32, config={"path": path, "BLOCK_K": 32})
    assert torch.equal(y, (q[:, idx].t() - 8).float())


def test_automatic_path_no_bias_and_strided_x():
    """config=None (default config, path by M), bias None, x read through its strides."""
    for m in (2, 9):  # GEMV, tiled
        x_t = torch.randn(96, m)  # x = x_t.t(): strides (1, M)
        _, w, s, _ = q8._make_int8_inputs((m, 17, 96), torch.float32, CPU, 1)
        ref = q8.int8_reference(x_t.t().double(), w, s.double())
        _check(q8.int8_weight_only_matmul(x_t.t(), w, s), ref, torch.float32)
        _, wp, sc, ze, g, _ = q4._make_int4_inputs((m, 17, 96, 32), torch.float32, CPU, 1)
        ref = q4.int4_reference(x_t.t().double(), wp, sc.double(), ze.double(), g)
        _check(q4.int4_weight_only_matmul(x_t.t(), wp, sc, ze, g), ref, torch.float32)


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_bf16_gemv_on_cpu(fmt):
    """The GEMV paths use no tl.dot, so the interpreter runs bf16 correctly."""
    shape = (3, 17, 96)
    if fmt == "int8":
        (x, w, s, b), ref = _int8_case(shape, torch.bfloat16)
        y = q8.int8_weight_only_matmul(x, w, s, b, config={**GEMV_CFG, "path": "gemv"}, out=_poisoned(3, 17, torch.bfloat16))
    else:
        (x, w, s, z, g, b), ref = _int4_case((*shape, GROUP), torch.bfloat16)
        y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**GEMV_CFG, "path": "gemv"}, out=_poisoned(3, 17, torch.bfloat16))
    _check(y, ref, torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("stages,split_k", [(3, 1), (4, 2)])
def test_int8_gemv_streamed_loop_matches_reference(dtype, stages, split_k):
    """STAGES > 1 (loads streamed through shared memory on a GPU), with a partial last K step
    (K = 160 over BLOCK_K 64) and split-K; STAGES outside 1..8 is refused with the fix."""
    (x, w, s, b), ref = _int8_case((1, 100, 160), dtype)
    cfg = {"path": "gemv", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": split_k, "STAGES": stages}
    _check(q8.int8_weight_only_matmul(x, w, s, b, config=cfg, out=_poisoned(1, 100, dtype)), ref, dtype)
    with pytest.raises(ValueError, match="STAGES must be an integer from 1 to 8"):
        q8.int8_weight_only_matmul(x, w, s, b, config={**cfg, "STAGES": 0})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_int8_conversion_matches_reference(dtype):
    """int8 -> fp32 (prmt PTX on a GPU; the integer-add trick under the interpreter, where PTX
    cannot run) over every int8 value, -128 included, with whole and partial K steps, streamed or
    not, split-K."""
    from agnitra.kernels.spec import interpreting

    (x, _, s, b), _ = _int8_case((2, 96, 160), dtype)
    w = (torch.arange(96 * 160, device=CPU) % 256 - 128).to(torch.int8).reshape(96, 160)  # each value many times
    ref = q8.int8_reference(x.double(), w, s.double(), b.double())
    for block_k, stages, split_k in ((32, 1, 1), (64, 3, 1), (64, 1, 2)):
        cfg = {"path": "gemv", "BLOCK_N": 16, "BLOCK_K": block_k, "SPLIT_K": split_k, "STAGES": stages}
        _check(q8.int8_weight_only_matmul(x, w, s, b, config=cfg, out=_poisoned(2, 96, dtype)), ref, dtype)
    assert qcommon._ptx(q8.INT8_TO_F32_ASM) == ("" if interpreting() else q8.INT8_TO_F32_ASM)


@pytest.mark.parametrize("m,split_k,stages,block_k", [(1, 1, 1, 64), (3, 2, 3, 64), (1, 4, 1, 64), (1, 1, 1, 256), (1, 1, 3, 256)])
def test_int8_gemv_partial_blocks_match_reference(m, split_k, stages, block_k):
    """Shape and strides compiled in, rows past the end clamped to the last: a partial last block of
    rows and of K (N = 100, K = 160 over 64), batch 1 and 3, split-K, streamed or not; one step a
    program (split 4 x 64, or a whole masked row of 256: summed at once, no accumulator tile)."""
    (x, w, s, b), ref = _int8_case((m, 100, 160), torch.bfloat16)
    cfg = {"path": "gemv", "BLOCK_N": 16, "BLOCK_K": block_k, "SPLIT_K": split_k, "STAGES": stages}
    _check(q8.int8_weight_only_matmul(x, w, s, b, config=cfg, out=_poisoned(m, 100, torch.bfloat16)), ref, torch.bfloat16)


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_split_k_writes_every_partial(fmt, monkeypatch):
    """SPLIT_K > 1: the fp32 partials buffer is poisoned too (torch.empty filled with NaN)."""
    empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)
    shape = (3, 100, 160)
    cfg = {"path": "gemv", "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 4}
    if fmt == "int8":
        (x, w, s, b), ref = _int8_case(shape, torch.float32)
        y = q8.int8_weight_only_matmul(x, w, s, b, config=cfg)
    else:
        (x, w, s, z, g, b), ref = _int4_case((*shape, GROUP), torch.float32)
        y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg)
    _check(y, ref, torch.float32)


# --------------------------------------------------------------------------------------------
# The int4 word kernel (M = 1), the tensor-core kernel, in-kernel split-K
# --------------------------------------------------------------------------------------------


def _counters_zero() -> bool:
    return all(int(buf.abs().sum()) == 0 for bufs in qsk._COUNTERS.values() for buf in bufs)


def _repeats_bit_for_bit(y: torch.Tensor, launch) -> None:
    """On a GPU, a second launch gives y's bits again: split-K partials are summed in a fixed order,
    whichever program arrives last. Not launched again under the interpreter, which runs a grid's
    programs one after another in one order: there a second launch could differ only through what the
    first left behind in the arrival counters, and the tests check those directly (`_counters_zero`)."""
    if ON_GPU:
        assert torch.equal(y, launch()), "bitwise repeatable"


@pytest.mark.parametrize("split_k,prefetch,stages,dtype", each_config(ALL_DTYPES, [(1, False, 1), (2, False, 1), (4, False, 1), (1, True, 1), (4, True, 1), (2, False, 3), (1, True, 4)]))
def test_int4_word_kernel_matches_reference(dtype, split_k, prefetch, stages):
    """Batch 1, N not a multiple of BLOCK_N, groups of 64 and 128 codes, split-K fixed up in the
    kernel, with and without the next step's words prefetched, the loop streamed through shared
    memory (STAGES > 1: a compiled-kernel matter, exercised on the GPU by AGNITRA_GPU_TESTS=1)."""
    for shape in ((1, 17, 256, 64), (1, 40, 512, 128)):
        (x, w, s, z, g, b), ref = _int4_case(shape, dtype)
        cfg = {"path": "gemv", "KERNEL": "words", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": split_k, "PREFETCH": prefetch, "STAGES": stages}
        y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(1, shape[1], dtype))
        _check(y, ref, dtype)
        _repeats_bit_for_bit(y, lambda: q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg))
    assert _counters_zero(), "the last program of every block resets its arrival counter"


def test_int4_word_kernel_refuses_what_it_cannot_read():
    (x, w, s, z, g, b), _ = _int4_case((1, 17, 256, 64), torch.float32)
    cfg = {"path": "gemv", "KERNEL": "words", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 1}
    with pytest.raises(ValueError, match="KERNEL='bytes'"):
        q4.int4_weight_only_matmul(torch.cat([x, x]), w, s, z, g, b, config=cfg)  # M = 2
    with pytest.raises(ValueError, match="must divide group_size"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "BLOCK_K": 128})  # two groups a step
    odd = torch.zeros(17, 130, dtype=torch.uint8, device=CPU)[:, 1:129]  # rows that do not start on a 4-byte word
    odd.copy_(w)
    with pytest.raises(ValueError, match="aligned words"):
        q4.int4_weight_only_matmul(x, odd, s, z, g, b, config=cfg)
    y = q4.int4_weight_only_matmul(x, odd, s, z, g, b, config={**cfg, "KERNEL": "bytes"})
    assert torch.allclose(y, q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("split_k,vec,prefetch,stages,dtype", each_config(ALL_DTYPES, [(1, 2, False, 1), (2, 4, True, 1), (4, 2, True, 1), (1, 1, False, 1), (2, 2, False, 3),
                                                                                 (1, 2, 2, 1), (4, 4, 2, 1)]))
def test_int4_row_kernel_matches_reference(dtype, split_k, vec, prefetch, stages):
    """Batch 1: the last block overlaps its neighbour (N = 17, 40 over blocks of 16 / 32) and
    stores only its own rows; steps of 8 and 16 words (groups of 64 and 128 codes); split-K; 1, 2
    or 4 words a lane; with and without the next step's words (PREFETCH 1), or all its reads
    (PREFETCH 2), requested a step ahead."""
    for shape, block_k, block_n, warps in (((1, 17, 256, 64), 64, 16, 1), ((1, 40, 512, 128), 128, 32, 2), ((1, 40, 512, 128), 64, 16, 1)):
        (x, w, s, z, g, b), ref = _int4_case(shape, dtype)
        cfg = {"path": "gemv", "KERNEL": "rows", "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split_k, "num_warps": warps,
               "VEC": vec, "PREFETCH": prefetch, "STAGES": stages}
        y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(1, shape[1], dtype))
        _check(y, ref, dtype)
        _repeats_bit_for_bit(y, lambda: q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg))
    assert _counters_zero(), "the last program of every block resets its arrival counter"


@pytest.mark.parametrize("split_k,vec,prefetch,dtype", each_config(ALL_DTYPES, [(1, 4, True), (2, 2, False), (1, 2, False), (1, 4, 2), (2, 2, 2)]))
def test_int4_row_kernel_with_several_groups_a_step(dtype, split_k, vec, prefetch):
    """Steps of 2 to 4 groups (BLOCK_K a multiple of G dividing K): each group's words get their
    own scale and zero; N not a multiple of BLOCK_N (the last block overlaps), split-K."""
    for shape, block_k, block_n, warps in (((1, 17, 256, 64), 128, 4, 1), ((1, 44, 512, 64), 256, 8, 2), ((1, 44, 1024, 128), 512, 16, 2)):
        (x, w, s, z, g, b), ref = _int4_case(shape, dtype)
        cfg = {"path": "gemv", "KERNEL": "rows", "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split_k, "num_warps": warps,
               "VEC": vec, "PREFETCH": prefetch}
        y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(1, shape[1], dtype))
        _check(y, ref, dtype)
    assert _counters_zero(), "the last program of every block resets its arrival counter"


@pytest.mark.parametrize("kernel", ["rows", "words", "tc"])
def test_int4_gemv_refuses_more_splits_than_steps(kernel):
    """A split with no step would prefetch past the end of x and the weight (on the H100: an illegal
    address at 5632x2048, SPLIT_K 2 over one step of 2048): the launcher refuses it, naming the fix."""
    (x, w, s, z, g, b), _ = _int4_case((1, 32, 256, 128), torch.float16)
    cfg = {"path": "gemv", "KERNEL": kernel, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 1, "VEC": 2, "PREFETCH": 1}
    with pytest.raises(ValueError, match=r"SPLIT_K=4 is more than the 2 step\(s\) .* use SPLIT_K <= 2"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg)


@pytest.mark.parametrize("n,k", [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096), (2048, 2048), (256, 2048), (5632, 2048), (2048, 5632), (32000, 2048)])
def test_int4_batch1_default_is_a_tried_config(n, k):
    """At llama decode shapes the default is a config of the tuning space (so the tuner measures
    the default against the same space it searches): the tensor-core kernel for 16-bit
    activations from 1024 outputs, short rows below and for whole rows of 2048 up to 2048 outputs,
    the row kernel for fp32 (no MMA)."""
    shape = (1, n, k, 128)
    for dtype, kernel in ((torch.bfloat16, "tc" if n >= 1024 and (n, k) != (2048, 2048) else "rows"), (torch.float32, "rows")):
        default = q4.int4_gemv_default_config(shape, dtype)
        configs = q4.int4_gemv_configs(shape, dtype)
        assert default["KERNEL"] == kernel and default in configs
        assert len(configs) <= 128  # exhaustive within the trial budget the H100 runs of kernels.py give (--max-trials 128)
        assert dtype != torch.float32 or all(c["KERNEL"] != "tc" for c in configs)


def test_int4_batch1_default_runs_at_small_shapes():
    """The default at batch 1 for fp16 activations (a whole row of 2048 codes a program, the tensor-core
    kernel over 64 rows a program, the word kernel split along K) matches the reference."""
    shapes = ((1, 64, 2048, 128), (1, 100, 512, 64), (1, 17, 256, 64))  # 64 rows: the fewest the whole-row default takes
    assert [q4.int4_gemv_default_config(shape, torch.float16)["KERNEL"] for shape in shapes] == ["rows", "tc", "words"]
    for shape in shapes:
        (x, w, s, z, g, b), ref = _int4_case(shape, torch.float16)
        _check(q4.int4_weight_only_matmul(x, w, s, z, g, b, out=_poisoned(1, shape[1], torch.float16)), ref, torch.float16)


@pytest.mark.parametrize("m,split_k,warps,prefetch,stages,dtype", each_config(HALF_DTYPES, [(1, 1, 1, False, 1), (3, 2, 2, True, 1), (8, 4, 1, True, 1), (1, 1, 2, True, 1),
                                                                                    (2, 2, 2, False, 3), (1, 1, 2, "X_NOW", 1), (3, 4, 1, "X_NOW", 1)]))
def test_int4_tensor_core_rows_kernel_matches_reference(dtype, m, split_k, warps, prefetch, stages):
    """KERNEL 'tc' (the MMA fragments emulated under the interpreter, the inline PTX on a GPU):
    N not a multiple of 16 (a padded tile), more tiles a program than the matrix has (the last
    program repeats a tile and stores nothing twice), batch 1 to 8, groups of 64 and 128, steps
    of one and two 64-feature chunks, the next step's reads prefetched (X_NOW: all but x) or streamed
    through shared memory (STAGES 3: a compiled-kernel matter, exercised on the GPU), split-K."""
    # splits <= steps; N = 20 a warp: 2 programs, the last with a padded tile (and a repeated one with 2 warps); the last: one program of 4 tiles, the 4th repeated
    for shape, block_n, block_k in (((m, 20 * warps, 256, 64), 16 * warps, 64), ((m, 17, 512, 128), 32 * warps, 128), ((m, 40, 256, 64), 64, 64)):
        (x, w, s, z, g, b), ref = _int4_case(shape, dtype)
        cfg = {"path": "gemv", "KERNEL": "tc", "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split_k, "num_warps": warps, "PREFETCH": bool(prefetch),
               "STAGES": stages, "X_NOW": prefetch == "X_NOW"}
        y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(m, shape[1], dtype))
        _check(y, ref, dtype)
        _repeats_bit_for_bit(y, lambda: q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg))
    assert _counters_zero(), "the last program of every block resets its arrival counter"


@pytest.mark.parametrize("m,split_k,warps,prefetch,dtype", each_config(HALF_DTYPES, [(1, 1, 2, True), (3, 2, 2, True), (1, 1, 4, False), (2, 2, 4, "X_NOW"), (8, 1, 2, False)]))
def test_int4_tensor_core_warp_k_matches_reference(dtype, m, split_k, warps, prefetch):
    """KERNEL 'tc' with WARP_K (the warps split each step's features, their sums meet after the
    loop): warps within one group, warps over whole groups (steps of several groups), one or more
    tiles a program, a padded tile and a repeated one, batch 1 to 8, split-K on top, and one step a
    program (BLOCK_K = K / SPLIT_K: with PREFETCH every word read before the wait)."""
    cases = (((m, 20, 512, 128), 16, 64), ((m, 17, 1024, 64), 32, 128), ((m, 40, 1024, 128), 64, 64), ((m, 20, 512, 64), 16, 512 // (split_k * warps)))
    for shape, block_n, per_warp in cases:
        (x, w, s, z, g, b), ref = _int4_case(shape, dtype)
        cfg = {"path": "gemv", "KERNEL": "tc", "WARP_K": True, "BLOCK_N": block_n, "BLOCK_K": per_warp * warps, "SPLIT_K": split_k, "num_warps": warps,
               "PREFETCH": bool(prefetch), "X_NOW": prefetch == "X_NOW"}
        y = q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(m, shape[1], dtype))
        _check(y, ref, dtype)
        _repeats_bit_for_bit(y, lambda: q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg))
    assert _counters_zero(), "the last program of every block resets its arrival counter"


def test_int4_tensor_core_warp_k_refuses_steps_the_warps_cannot_share():
    (x, w, s, z, g, b), _ = _int4_case((1, 40, 512, 128), torch.float16)
    cfg = {"path": "gemv", "KERNEL": "tc", "WARP_K": True, "BLOCK_N": 16, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4}
    with pytest.raises(ValueError, match="multiple of 64 \\* num_warps"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg)  # 32 features a warp


@pytest.mark.parametrize("m,split_k,warps,prefetch,dtype", each_config(HALF_DTYPES, [(1, 2, 1, True), (3, 4, 2, "X_NOW"), (8, 8, 1, True), (2, 4, 1, False), (1, 3, 1, True), (2, 7, 1, True)]))
def test_int4_tensor_core_waiting_fixup_matches_the_counter(dtype, m, split_k, warps, prefetch):
    """FIXUP "wait" (split SPLIT_K - 1 waits for its siblings' partials in the slots; on a GPU the grid
    is launched cooperatively): the reference, and the counter fix-up's sum bit for bit (same order),
    launch after launch; every slot is marked empty again afterwards and no counter is touched. Splits
    that are no power of two (the tensor-core kernel takes any: 3 and 7 splits of 8 and 16 steps, some
    splits a step short) as well."""
    # N not a multiple of the block (20 rows a warp: the last program's tiles a padded one and, with 2 warps, a repeated one), splits <= steps
    shapes = ((m, 20 * warps, 512, 64), (m, 100 if ON_GPU else 20, 1024, 128))
    # under the interpreter (seconds a launch) one shape a config: the longer where the split needs its 16 steps (there 2 tiles, not 7)
    for shape in shapes if ON_GPU else shapes[1:] if split_k > 4 else shapes[:1]:
        (x, w, s, z, g, b), ref = _int4_case(shape, dtype)
        cfg = {"path": "gemv", "KERNEL": "tc", "BLOCK_N": 16 * warps, "BLOCK_K": 64, "SPLIT_K": split_k, "num_warps": warps, "PREFETCH": bool(prefetch),
               "X_NOW": prefetch == "X_NOW"}
        waiting = q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "FIXUP": "wait"}, out=_poisoned(m, shape[1], dtype))
        _check(waiting, ref, dtype)
        assert torch.equal(waiting, q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg)), "the counter fix-up's sum, bit for bit"
        if ON_GPU:  # the interpreter runs the waiting split after its siblings wrote its slots: a slot left full would not show here, only below
            assert torch.equal(waiting, q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "FIXUP": "wait"})), "repeatable: the slots were emptied"
    slots = qsk.reserve_split_k_slots(x.device)
    assert bool((slots.view(torch.int32) == qsk.SLOT_EMPTY).all()), "every slot marked empty between launches"
    assert _counters_zero()


def test_int4_tensor_core_waiting_fixup_refusals_and_refinements():
    """A FIXUP other than "count" or "wait" is refused with the values it takes; the waiting fix-up is
    a refinement of split tensor-core configs on a GPU only (the cooperative launch), also at the
    other PDL trigger point, and never of unsplit ones or of other kernels."""
    (x, w, s, z, g, b), _ = _int4_case((1, 40, 512, 64), torch.float16)
    cfg = {"path": "gemv", "KERNEL": "tc", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 1, "PREFETCH": True}
    with pytest.raises(ValueError, match="FIXUP must be 'count' or 'wait'"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "FIXUP": "atomic"})
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="SPLIT_K must be a positive integer"):
            q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "SPLIT_K": bad})
    with pytest.raises(ValueError, match="SPLIT_K must be a positive power of two"):  # any split is the tensor-core kernel's alone
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "KERNEL": "rows", "SPLIT_K": 3})
    tc = {k: v for k, v in cfg.items() if k != "path"}
    with mock.patch("agnitra.kernels.pdl.pdl_supported", lambda device: True):
        gpu = q4._int4_refinements(tc, torch.device("cuda"))
    assert {**tc, "FIXUP": "wait"} in gpu and {**tc, "PDL": "wait", "FIXUP": "wait"} in gpu
    assert not any(c.get("FIXUP") for c in q4._int4_refinements(tc, torch.device("cpu"))), "no cooperative launch without a GPU"
    assert not any(c.get("FIXUP") for c in q4._int4_refinements({**tc, "SPLIT_K": 1}, torch.device("cuda")))
    assert not any(c.get("FIXUP") for c in q4._int4_refinements({**tc, "KERNEL": "rows"}, torch.device("cuda")))


def test_split_k_slots_grow_outside_a_capture_and_refuse_inside_one():
    """The slots are made on first use, grown when a launch needs more (the old buffer kept alive: CUDA
    graphs hold its address), and marked empty; inside a CUDA graph capture a shortfall is an error
    that names the fix instead of an allocation of the graph's pool."""
    device = torch.device("cpu")
    first = qsk.reserve_split_k_slots(device)
    grown = qsk.reserve_split_k_slots(device, first.numel() + 1)
    assert grown.numel() > first.numel() and first in qsk._SLOTS[device] and bool((grown.view(torch.int32) == qsk.SLOT_EMPTY).all())
    assert qsk.reserve_split_k_slots(device, 5) is grown
    fake_cuda = torch.device("cuda", 99)
    with mock.patch("torch.cuda.is_current_stream_capturing", lambda: True), pytest.raises(RuntimeError, match="reserve_split_k_slots\\(device, 7\\) before capturing"):
        qsk.reserve_split_k_slots(fake_cuda, 7)
    with mock.patch("torch.cuda.is_current_stream_capturing", lambda: True), pytest.raises(RuntimeError, match="reserve_split_k_counters\\(device, 9\\) before capturing"):
        qsk.reserve_split_k_counters(fake_cuda, 9)  # the arrival counters share the mechanism


def test_int4_tensor_core_small_programs_let_the_next_kernel_in_at_the_wait():
    """The space holds small tensor-core programs (one warp, one or two tiles) split 2-8 with PDL
    "wait" (their H100 winner at 14336x4096), capped at 32 one-warp programs an SM; such a config
    runs where PDL is off (the interpreter: the key is ignored) and matches the reference."""
    configs = q4.int4_gemv_configs((1, 14336, 4096, 128), torch.bfloat16)
    narrow = [c for c in configs if c.get("PDL") == "wait"]
    assert {"KERNEL": "tc", "BLOCK_N": 16, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 1, "num_stages": 1, "PREFETCH": True, "PDL": "wait"} in narrow
    assert all(c["SPLIT_K"] > 1 and -(-14336 // c["BLOCK_N"]) * c["SPLIT_K"] * c["num_warps"] <= 32 * qcommon._SMS for c in narrow)
    assert not any(c.get("PDL") == "wait" for c in q4.int4_gemv_configs((1, 14336, 4096, 128), torch.float32)), "no tensor cores for fp32"
    (x, w, s, z, g, b), ref = _int4_case((1, 40, 512, 128), torch.bfloat16)
    cfg = {"path": "gemv", **narrow[0], "BLOCK_N": 32, "SPLIT_K": 2}
    _check(q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(1, 40, torch.bfloat16)), ref, torch.bfloat16)


def test_int4_tensor_core_shuffle_places_each_code_in_its_fragment():
    """Word (tile, chunk, lane = 4g + t, j), nibble i = 4p + 2e + h holds the code of row
    16 tile + 2g + h, feature 64 chunk + 16t + 4j + 2e + p (rows past N are 0); cached per weight;
    the scales and zeros as (s, z) pairs tile by tile."""
    gen = torch.Generator(device="cpu").manual_seed(3)
    q = torch.randint(0, 16, (40, 128), generator=gen, device="cpu")
    packed = qfmt.pack_int4(q)
    words = q4tc.shuffle_int4_for_tc(packed)
    assert words.shape == (3, 2, 32, 4) and words.dtype == torch.int32
    for tile, chunk, lane, j, i in ((0, 0, 0, 0, 0), (1, 1, 13, 2, 5), (2, 0, 31, 3, 7), (0, 1, 6, 1, 2), (2, 1, 9, 0, 3)):
        g, t, p, e, h = lane // 4, lane % 4, i // 4, (i // 2) % 2, i % 2
        row, feature = 16 * tile + 2 * g + h, 64 * chunk + 16 * t + 4 * j + 2 * e + p
        code = (int(words[tile, chunk, lane, j]) >> (4 * i)) & 0xF
        assert code == (int(q[row, feature]) if row < 40 else 0), (tile, chunk, lane, j, i)
    assert q4tc._int4_tc_words(packed) is q4tc._int4_tc_words(packed), "shuffled once per weight"
    packed.add_(0)  # written in place: shuffled again
    assert torch.equal(q4tc._int4_tc_words(packed), words)
    scales, zeros = torch.rand(40, 2, device="cpu").to(torch.bfloat16), torch.rand(40, 2, device="cpu").to(torch.bfloat16)
    pairs = q4tc._int4_tc_scales(scales, zeros, torch.bfloat16)
    assert pairs.shape == (3, 2, 16) and pairs.dtype == torch.int32
    halves = pairs.view(torch.bfloat16).view(3, 2, 16, 2)  # [tile, group, row, (s, z)]
    assert torch.equal(halves[1, 1, 7, 0], scales[23, 1]) and torch.equal(halves[2, 0, 3, 1], zeros[35, 0])
    assert torch.equal(halves[2, 0, 8:], torch.zeros(8, 2, dtype=torch.bfloat16, device="cpu")), "rows past N are zero"
    with pytest.raises(ValueError, match="K % 64"):
        q4tc.shuffle_int4_for_tc(qfmt.pack_int4(torch.zeros(16, 96, dtype=torch.int64, device="cpu")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("m,n,block_n,block_k", [(33, 40, 32, 64), (9, 100, 64, 128), (3, 17, 16, 64)])
def test_int4_tiled_kernel_reads_the_tensor_core_words(dtype, m, n, block_n, block_k):
    """TC_WORDS: the tiled (batch > 8) kernel reads W^T tiles from the tensor-core GEMV's words
    instead of the packed bytes, the same products: partial row and column blocks, N not a multiple
    of 16 (the words' padded tile), groups of two steps; the words made once and cached, or given."""
    (x, w, s, z, g, b), ref = _int4_case((m, n, 256, 128), dtype)
    cfg = {"path": "tiled", "BLOCK_M": 16, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 2, "num_warps": 4, "TC_WORDS": True}
    _check(q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(m, n, dtype)), ref, dtype)
    words = q4tc.shuffle_int4_for_tc(w)
    y = q4.int4_weight_only_matmul(x, torch.zeros_like(w), s, z, g, b, config=cfg, tc_operands=(words, None))  # the words alone are read
    _check(y, ref, dtype)


def test_int4_tiled_kernel_dequantises_every_code_of_the_words_exactly():
    """One-hot rows of x pick weight columns through the words: every code of every nibble slot
    comes back exactly (scale 1, zero 0, fp32), so the words' nibble order is W^T's natural order."""
    k, idx = 128, list(range(0, 128, 7))  # 19 rows > 8: the tiled path
    q = (torch.arange(32)[:, None] * 5 + torch.arange(k)[None, :] * 3) % 16  # [32, K] codes
    x = torch.eye(k)[idx]
    y = q4.int4_weight_only_matmul(x, qfmt.pack_int4(q), torch.ones(32, 1), torch.zeros(32, 1), 128,
                                   config={"path": "tiled", "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "TC_WORDS": True})
    assert torch.equal(y, (q[:, idx].t() - 8).float())


def test_int4_tiled_kernel_refuses_blocks_that_split_the_words():
    (x, w, s, z, g, b), _ = _int4_case((9, 32, 128, 64), torch.float32)
    with pytest.raises(ValueError, match="TC_WORDS reads whole 64-feature chunks of the words: BLOCK_K must be a multiple of 64, got 32"):
        q4.int4_weight_only_matmul(x, w, s, z, g, config={"path": "tiled", "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "TC_WORDS": True})


def test_int4_module_makes_the_tensor_core_operands_ahead_and_the_op_never_makes_them(monkeypatch):
    """A kernel-backed int4 Linear makes the shuffled words and (s, z) pairs when it is built (a
    first call inside a CUDA graph capture could not allocate them); the custom op without them
    runs the row kernel instead of shuffling on the fly, and both agree with the reference."""
    from agnitra.kernels import modules as km
    from agnitra.kernels import ops

    tc = {"KERNEL": "tc", "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 2, "PREFETCH": True}
    lin = torch.nn.Linear(128, 40, bias=True, device=CPU).to(torch.float16)
    module = km.TritonInt4Linear.from_linear(lin, 64)  # under 64 outputs the batch-1 default reads the packed bytes: both kept
    monkeypatch.setattr(ops, "config_for", lambda kernel, shape, dtype, device_type: dict(tc))
    assert module.weight is not None and module.tc_words is not None and torch.equal(module.tc_words, q4tc.shuffle_int4_for_tc(module.weight))
    assert "tc_words" not in module.state_dict(), "remade from the weights, not saved"
    x = torch.randn(1, 128, device=CPU).to(torch.float16)
    ref = q4.int4_reference(x.double(), module.weight, module.scales.double(), module.zeros.double(), 64, module.bias.double())
    _check(module(x), ref, torch.float16)
    bare = ops.int4_weight_only_linear(x, module.weight, module.scales, module.zeros, 64, module.bias)  # no operands: the row kernel
    _check(bare, ref, torch.float16)
    assert not hasattr(module.weight, "_agnitra_tc_words"), "the op made no operands of its own"
    no_tc = km.TritonInt4Linear.from_linear(torch.nn.Linear(96, 16, device=CPU).to(torch.float16), 32)  # K % 64: no tensor-core operands
    assert no_tc.tc_words is None and no_tc.tc_scales is None


def _int4_module(n: int, k: int = 128, group: int = 64, seed: int = 0):
    """A kernel-backed fp16 int4 Linear with a bias, and its packed bytes, scales and zeros as quantised."""
    from agnitra.kernels import modules as km

    torch.manual_seed(seed)
    lin = torch.nn.Linear(k, n, bias=True, device=CPU).to(torch.float16)
    packed, scales, zeros = q4.quantize_int4_groupwise(lin.weight.detach(), group, torch.float16)
    return km.TritonInt4Linear.from_linear(lin, group), (packed, scales, zeros, lin.bias.detach())


def test_int4_module_keeps_the_weight_once_as_tensor_core_words():
    """Where the batch-1 GEMV is the tensor-core kernel, an int4 layer keeps only the shuffled words
    (the packed int4 bytes' size); the GEMV (batch 1-8), the tiled kernel (larger batches) and
    activations of another dtype (tiled) all read them and agree with the float64 reference."""
    module, (packed, scales, zeros, bias) = _int4_module(80)
    assert module.weight is None and "tensor-core words" in repr(module)
    assert module.tc_words.numel() * 4 == packed.numel(), "one copy: the words take the packed bytes"
    assert torch.equal(module.packed_weight, packed)
    for m, dtype in ((1, torch.float16), (3, torch.float16), (20, torch.float16), (2, torch.float32)):
        x = torch.randn(m, 128, device=CPU).to(dtype)
        ref = q4.int4_reference(x.double(), packed, scales.double(), zeros.double(), 64, bias.double())
        _check(module(x), ref, dtype)


def test_int4_module_keeps_the_packed_bytes_where_its_tuned_batch1_kernel_reads_them(tmp_path, monkeypatch):
    """The layer asks this device's tuning cache (a real one, in a fresh cache dir) which batch-1 GEMV it runs."""
    from agnitra.kernels import modules as km
    from agnitra.kernels import ops
    from agnitra.kernels.spec import get_kernel
    from agnitra.kernels.tuning_cache import TuningCache, cache_key
    from agnitra.telemetry.signature import device_signature, signature_id

    linear = torch.nn.Linear(128, 80, device=CPU).to(torch.float16)
    assert km.TritonInt4Linear.from_linear(linear, 64).weight is None, "the default batch-1 GEMV here is the tensor-core kernel"
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path))
    device = torch.empty(0, device=CPU).device
    rows = {"KERNEL": "rows", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 1}
    key = cache_key("int4_gemv", get_kernel("int4_gemv").bucket((1, 80, 128, 64)), torch.float16)
    TuningCache(tmp_path, signature_id(device_signature(device))).put(key, {"config": rows})
    ops._tuned_entries.cache_clear(), ops.config_for.cache_clear()
    try:
        module = km.TritonInt4Linear.from_linear(linear, 64)
    finally:
        ops._tuned_entries.cache_clear(), ops.config_for.cache_clear()  # the other tests read their own cache dir
    assert module.weight is not None and module.tc_words is not None and "packed + tensor-core words" in repr(module)


def test_int4_state_dict_holds_the_packed_bytes_and_loading_remakes_the_words():
    """The state dict holds the packed bytes whichever copies a layer keeps; loading one into a layer
    (words only, or packed bytes and words) remakes its words and (s, z) pairs: no stale copy."""
    source, (packed, _, _, _) = _int4_module(80, seed=1)
    state = source.state_dict()
    assert set(state) == {"weight", "scales", "zeros", "bias"} and torch.equal(state["weight"], packed)
    x = torch.randn(2, 128, device=CPU).to(torch.float16)
    words_only, _ = _int4_module(80, seed=2)
    words_only.load_state_dict(state)
    assert torch.equal(words_only.tc_words, source.tc_words) and torch.equal(words_only.tc_scales, source.tc_scales)
    assert torch.equal(words_only(x), source(x))
    both, _ = _int4_module(40, seed=3)  # under 64 outputs: packed bytes and words
    small_state = _int4_module(40, seed=4)[0].state_dict()
    both.load_state_dict(small_state)
    assert torch.equal(both.tc_words, q4tc.shuffle_int4_for_tc(small_state["weight"])), "the words follow the loaded bytes"
    with pytest.raises(RuntimeError, match="int4 packed bytes must be uint8"):
        words_only.load_state_dict({**state, "weight": state["weight"][:, :32]})
    with pytest.raises(RuntimeError, match="Missing key"):
        words_only.load_state_dict({k: v for k, v in state.items() if k != "weight"})


def test_int4_words_matmul_refuses_what_the_words_cannot_run():
    module, _ = _int4_module(80)
    x = torch.randn(1, 128, device=CPU).to(torch.float16)
    s, z = module.scales, module.zeros
    with pytest.raises(ValueError, match="words must be int32"):
        q4.int4_words_matmul(x, module.tc_words[:, :1], s, z, 64)
    with pytest.raises(ValueError, match="KERNEL='tc' with its"):
        q4.int4_words_matmul(x, module.tc_words, s, z, 64, config={"path": "gemv"})


def test_int4_unshuffle_inverts_the_tensor_core_shuffle():
    gen = torch.Generator(device="cpu").manual_seed(6)
    for n, k in ((40, 128), (16, 64), (520, 32768)):  # a partial tile; one tile; two passes (32 tiles and a partial one)
        packed = qfmt.pack_int4(torch.randint(0, 16, (n, k), generator=gen, device="cpu"))
        assert torch.equal(q4tc.unshuffle_int4_from_tc(q4tc.shuffle_int4_for_tc(packed), n), packed)
    with pytest.raises(ValueError, match="for N=64"):
        q4tc.unshuffle_int4_from_tc(q4tc.shuffle_int4_for_tc(packed[:16]), 64)


def test_modules_reserve_the_split_k_counters_when_built(monkeypatch):
    """Kernel-backed Linears reserve the device's split-K counters when they are built and when they
    move, so a split-K launch in a first call (inside a CUDA graph capture) allocates nothing that outlives it."""
    from agnitra.kernels import modules as km

    dev = torch.empty(0, device=CPU).device  # as tensors name it ("cuda:0", not "cuda")
    monkeypatch.setattr(qsk, "_COUNTERS", {})
    km.TritonInt8Linear.from_linear(torch.nn.Linear(64, 16, device=CPU))
    assert len(qsk._COUNTERS[dev]) == 1
    (x, w, s, z, g, b), ref = _int4_case((1, 40, 256, 64), torch.float16)
    cfg = {"path": "gemv", "KERNEL": "rows", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 1}
    _check(q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg), ref, torch.float16)
    int4 = km.TritonInt4Linear.from_linear(torch.nn.Linear(128, 16, device=CPU).to(torch.float16), 64)
    assert len(qsk._COUNTERS[dev]) == 1, "the split-K launch and the second module used the reserved buffer"
    monkeypatch.setattr(qsk, "_COUNTERS", {})
    int4.to(CPU)  # moved (here onto the same device): reserved where it now lives
    assert len(qsk._COUNTERS[dev]) == 1


def test_int4_modules_reserve_the_waiting_fixup_slots_their_tuned_configs_need(tmp_path, monkeypatch):
    """Where a layer's tuned GEMV (any batch bucket 1-8; this device's tuning cache, a real one in a
    fresh cache dir) takes FIXUP "wait", building the layer reserves (SPLIT_K - 1) x batch x N slots,
    so its first call inside a CUDA graph capture allocates nothing; no slots where none does."""
    from agnitra.kernels import modules as km
    from agnitra.kernels import ops
    from agnitra.kernels.tuning_cache import TuningCache, cache_key
    from agnitra.telemetry.signature import device_signature, signature_id

    dev = torch.empty(0, device=CPU).device
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(qsk, "_SLOTS", {})
    tuned = {"KERNEL": "tc", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 4, "num_warps": 1, "PREFETCH": True}
    cache = TuningCache(tmp_path, signature_id(device_signature(dev)))
    for m, n in ((1, 40), (1, 40_000), (2, 40_000)):
        fixup = {"FIXUP": "wait"} if m == 2 else {}
        cache.put(cache_key("int4_gemv", get_kernel("int4_gemv").bucket((m, n, 128, 64)), torch.float16), {"config": {**tuned, **fixup}})
    ops._tuned_entries.cache_clear(), ops.config_for.cache_clear()
    try:
        km.TritonInt4Linear.from_linear(torch.nn.Linear(128, 40, device=CPU).to(torch.float16), 64)
        assert dev not in qsk._SLOTS, "no layer GEMV waits: nothing reserved"
        layer = km.TritonInt4Linear.from_linear(torch.nn.Linear(128, 40_000, device=CPU).to(torch.float16), 64)
        assert qsk._SLOTS[dev][-1].numel() == 3 * 2 * 40_000, "batch bucket 2's (SPLIT_K - 1) x 2 x N"
        monkeypatch.setattr(qsk, "_SLOTS", {})
        layer.to(CPU)
        assert qsk._SLOTS[dev][-1].numel() == 3 * 2 * 40_000, "reserved again where the layer now lives"
    finally:
        ops._tuned_entries.cache_clear(), ops.config_for.cache_clear()  # the other tests read their own cache dir


def test_int4_tensor_core_shuffle_in_passes_matches_one_pass():
    """The shuffle works through the rows in passes of ~64 MB of codes: a matrix larger than one pass gives the same words."""
    gen = torch.Generator(device="cpu").manual_seed(5)
    q = torch.randint(0, 16, (520, 32768), generator=gen, device="cpu")  # 33 tiles, 32 a pass ((1 << 24) // (16 K))
    words = q4tc.shuffle_int4_for_tc(qfmt.pack_int4(q))
    tail = q4tc.shuffle_int4_for_tc(qfmt.pack_int4(q[16 * 32:]))
    assert words.shape == (33, 512, 32, 4) and torch.equal(words[32:], tail)


def test_int4_tensor_core_rows_refuses_what_it_cannot_run():
    (x, w, s, z, g, b), _ = _int4_case((1, 40, 256, 64), torch.float32)
    cfg = {"path": "gemv", "KERNEL": "tc", "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 1}
    with pytest.raises(ValueError, match="fp16/bf16 activations"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg)
    (x, w, s, z, g, b), _ = _int4_case((9, 40, 256, 64), torch.float16)
    with pytest.raises(ValueError, match="M <= 8"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg)
    (x, w, s, z, g, b), _ = _int4_case((1, 40, 256, 32), torch.float16)
    with pytest.raises(ValueError, match="multiples of 64"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "BLOCK_K": 32})
    (x, w, s, z, g, b), _ = _int4_case((1, 40, 192, 64), torch.float16)
    with pytest.raises(ValueError, match="a multiple of it dividing K=192"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "BLOCK_K": 128})  # two groups a step, K not a multiple of the step
    (x, w, s, z, g, b), _ = _int4_case((1, 40, 256, 64), torch.float16)
    with pytest.raises(ValueError, match="16 \\* num_warps"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "num_warps": 4})
    with pytest.raises(ValueError, match="X_NOW .* needs PREFETCH=True"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "X_NOW": True})


# what the sm_90 compiles below run: tests/sass_loop.py's arguments by case
_ASM_LAYOUT_CASES = ((128, 128, 4, "bf16", 1), (64, 64, 2, "fp16", 0), (256, 128, 8, "bf16", 1))  # BLOCK_N, BLOCK_K, warps, dtype, PREFETCH
_LLAMA_8B_LOOPS = (["--block-n", "128", "--block-k", "256", "--warps", "8", "--prefetch", "3", "--maxnreg", "128", "--k", "14336", "--n", "4096"],
                   ["--block-n", "64", "--block-k", "128", "--warps", "4", "--prefetch", "1", "--maxnreg", "128", "--split-k", "8", "--k", "4096", "--n", "4096"])
_PDL_ORDER_CASES = {"int8": ["--block-n", "8", "--block-k", "512"], "rows": ["--block-n", "8", "--block-k", "256", "--prefetch", "1"],
                    "tc": ["--block-n", "64", "--block-k", "128", "--prefetch", "1"]}


@pytest.fixture(scope="module")
def sass_runs(tmp_path_factory) -> dict[str, str]:
    """`tests/sass_loop.py` over every case above, compiled for sm_90 in ONE process without the interpreter, with
    this process's Triton (no GPU needed): what each case printed, by name ("loop i" cases append their
    results to the file under "loops"). One process, not one a case: its imports (torch, Triton, agnitra)
    take ~6 s of CPU. Skips where Triton cannot compile for sm_90."""
    import json
    import subprocess
    import sys

    loops = tmp_path_factory.mktemp("sass") / "loops.jsonl"
    cases = {f"asm {i}": ["--kernel", "tc", "--block-n", str(bn), "--block-k", str(bk), "--warps", str(warps), "--dtype", dtype, "--prefetch", str(prefetch),
                          "--asm-layout"] for i, (bn, bk, warps, dtype, prefetch) in enumerate(_ASM_LAYOUT_CASES)}
    cases.update({f"loop {i}": ["--kernel", "tc", *flags, "--json", str(loops)] for i, flags in enumerate(_LLAMA_8B_LOOPS)})
    cases.update({f"pdl {kernel}": ["--kernel", kernel, *flags, "--n", "4096", "--k", "4096", "--pdl-order", "--pdl-trigger", "wait"]
                  for kernel, flags in _PDL_ORDER_CASES.items()})
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])), TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "sass_loop.py"), "--each", json.dumps(cases)], capture_output=True, text=True, env=env, timeout=500)
    if run.returncode and ("ptxas" in run.stderr or "backend" in run.stderr.lower()):
        pytest.skip(f"cannot compile for sm_90 here: {run.stderr.strip().splitlines()[-1][:160]}")
    assert run.returncode == 0, run.stderr[-2000:]
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "loops": loops.read_text()}


def test_every_function_a_kernel_calls_on_the_device_is_jitted_with_it():
    """The compiler needs a kernel's callees jitted: `jit_kernel` jits the `@device_helper` functions a
    kernel names, found in the kernel's own module. A helper without the mark (or not imported where
    a kernel calls it) runs under the interpreter, as in these tests, and fails to compile on the GPU."""
    import types

    from agnitra.kernels import decode_layer
    from agnitra.kernels._triton import _DEVICE_HELPERS

    kernels = [fn for module in (q8, q4bytes, q4rows, q4tc, qtiled, decode_layer) for name, fn in vars(module).items()
               if name.endswith("_kernel") and isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__]
    assert len(kernels) == 10
    called, todo = set(), list(kernels)
    while todo:
        fn = todo.pop()
        for name in fn.__code__.co_names:
            value = fn.__globals__.get(name)
            if isinstance(value, types.FunctionType) and value.__module__.startswith("agnitra.kernels") and name not in called:
                assert name in _DEVICE_HELPERS, f"{fn.__name__} calls {name}, which is not marked @device_helper"
                called.add(name)
                todo.append(value)
    assert called == _DEVICE_HELPERS, f"marked but called by no kernel: {sorted(_DEVICE_HELPERS - called)}"


def test_int4_tc_asm_layout(sass_runs):
    """The inline PTX runs whole MMAs, so it is right only where each lane holds four consecutive
    elements of dim 2 and the 32 lanes span it (the words' 16-byte load layout): compiled for
    sm_90 with the installed Triton (no GPU needed; a process without the interpreter), the asm's
    operands are in exactly that layout, for bf16 and fp16 and several warp counts."""
    lanes_hold_four = re.compile(r"sizePerThread = \[(1, )+4\], threadsPerWarp = \[(1, )+32\]")
    for i in range(len(_ASM_LAYOUT_CASES)):
        stdout = sass_runs[f"asm {i}"]
        layouts = [line for line in stdout.splitlines() if line.startswith("asm layout:")]
        assert len(layouts) == 2 and all(lanes_hold_four.search(line) for line in layouts), (_ASM_LAYOUT_CASES[i], stdout)


def test_int4_tc_loop_keeps_its_sums_within_warps(sass_runs):
    """The tensor-core GEMV's main loop sums each group's chunks in registers: compiled for sm_90
    with the installed Triton (no GPU needed), the loop of the llama-8b winners has no CTA barrier
    and no shared-memory traffic: under Triton 3.6 as written, under 3.9 with its loads flipped
    (`quant.int4_tc.tc_flip`; unflipped, 20-52 barriers a step)."""
    import json

    loops = [json.loads(line) for line in sass_runs["loops"].splitlines()]
    assert len(loops) == 2 and all(loop["loop_instructions"] > 100 for loop in loops), loops  # the loop was found
    assert [(loop["barriers"], loop["shared"]) for loop in loops] == [(0, 0), (0, 0)], [loop["mix"] for loop in loops]


def test_sass_loop_finds_the_loop_and_where_its_weight_reads_sit():
    """sass_loop.py's reading of a disassembly (no compiler needed): the longest loop is the span from
    a label to the branch back to it, and the weight reads (evict-first) are placed within it, so a
    prefetch sunk below the MMAs is seen as such."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sass_loop", ROOT / "tests" / "sass_loop.py")
    sass_loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sass_loop)
    sass = """
        /*0000*/                   LDG.E.EF.128 R28, desc[UR4][R4.64] ;
.L_x_1:
        /*0010*/                   LDG.E.EL.128 R12, desc[UR4][R50.64] ;
        /*0020*/                   HMMA.16816.F32.BF16 R8, R4, R12, R8 ;
        /*0030*/                   HMMA.16816.F32.BF16 R8, R4, R14, R8 ;
        /*0040*/              @!P1 LDG.E.EF.128 R28, desc[UR8][R64.64] ;
        /*0050*/                   LDG.E.EF.128 R20, desc[UR8][R64.64+0x200] ;
        /*0060*/               @P0 BRA `(.L_x_1) ;
        /*0070*/                   EXIT ;
"""
    body = sass_loop.loop_body(sass)
    assert body[0].startswith("LDG.E.EL.128") and body[-1].startswith("@P0 BRA") and len(body) == 6  # the loop, not the load before it
    opcodes = [sass_loop.opcode(line) for line in body]
    assert opcodes == ["LDG", "HMMA", "HMMA", "LDG", "LDG", "BRA"]
    assert sass_loop.weight_load_placement(body) == [3, 4]  # after both MMAs: sunk
    assert sass_loop.load_placement(opcodes)["loads_ahead_of_math"] is False


def test_int4_row_kernel_refuses_what_it_cannot_read():
    (x, w, s, z, g, b), _ = _int4_case((1, 17, 256, 64), torch.float32)
    cfg = {"path": "gemv", "KERNEL": "rows", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 1}
    with pytest.raises(ValueError, match="M == 1"):
        q4.int4_weight_only_matmul(torch.cat([x, x]), w, s, z, g, b, config=cfg)
    with pytest.raises(ValueError, match="BLOCK_N <= N"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "BLOCK_N": 32})
    with pytest.raises(ValueError, match="a multiple of it dividing K"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "BLOCK_K": 512})  # eight groups a step, K = 256
    with pytest.raises(ValueError, match="VEC in"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "VEC": 3})
    with pytest.raises(ValueError, match="PREFETCH must be 0, 1"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "PREFETCH": 3})
    with pytest.raises(ValueError, match="PREFETCH must be False or True"):
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config={**cfg, "KERNEL": "words", "PREFETCH": 2})


@pytest.mark.parametrize("m", [1, 3, 16])
def test_int4_tensor_core_kernel_matches_reference(m):
    """The MMA GEMV's logic in fp16 (arithmetic dequantisation under the interpreter; the packed
    PTX conversion is checked by `test_int4_packed_conversion_constants` and on the GPU)."""
    for split_k in (1, 2):
        (x, w, s, z, g, b), ref = _int4_case((m, 40, 256, 64), torch.float16)
        cfg = {"path": "gemv", "KERNEL": "mma", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": split_k}
        _check(q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg, out=_poisoned(m, 40, torch.float16)), ref, torch.float16)
    with pytest.raises(ValueError, match="fp16 or bf16"):
        (x, w, s, z, g, b), _ = _int4_case((1, 40, 256, 64), torch.float32)
        q4.int4_weight_only_matmul(x, w, s, z, g, b, config=cfg)


@pytest.mark.parametrize("asm,dtype", [(q4bytes.INT4_ASM_BF16, torch.bfloat16), (q4bytes.INT4_ASM_FP16, torch.float16)], ids=["bf16", "fp16"])
def test_int4_packed_conversion_constants(asm, dtype):
    """The PTX's bit arithmetic, replayed on int32 tensors for every byte value: prmt spreads bytes
    (b0, b1) into 16-bit halves, lop3 = (a & 0x000F000F) | MAGIC, then fma(h, ONE, BIAS) per half
    must give exactly (low nibble - 8, high nibble - 8) in the activation dtype."""
    magic = int(re.search(r"0x000F000F, (0x[0-9A-F]+)", asm).group(1), 16)
    one = int(re.search(r"mov.b32 one, (0x[0-9A-F]+)", asm).group(1), 16)
    bias = int(re.search(r"mov.b32 bias, (0x[0-9A-F]+)", asm).group(1), 16)
    assert "prmt.b32 lo01, $4, 0, 0x4140" in asm and "shr.u32 hi01, lo01, 4" in asm and "0xEA" in asm  # (a & b) | c
    def half_float(bits: torch.Tensor) -> torch.Tensor:  # 16 low bits -> the float they encode
        return bits.to(torch.int16).view(dtype).float()

    scale, offset = half_float(torch.tensor([one & 0xFFFF])), half_float(torch.tensor([bias & 0xFFFF]))
    b = torch.arange(256, dtype=torch.int64)
    spread = b | (b.flip(0) << 16)  # prmt 0x4140 of bytes (b, 255 - b): halves b and 255 - b
    for shift, nibble in ((0, b & 0xF), (4, b >> 4)):
        word = ((spread >> shift) & 0x000F000F) | magic
        for half, expect in ((word & 0xFFFF, nibble), (word >> 16, nibble.flip(0))):
            value = (half_float(half) * scale + offset).to(dtype)  # exact: small integers
            assert torch.equal(value.float(), (expect - 8).float())


def _spread(configs: list[dict], count: int) -> list[dict]:
    """`count` configurations spread over the list (its first and last included)."""
    if len(configs) <= count:
        return configs
    step = (len(configs) - 1) / (count - 1)
    return [configs[round(i * step)] for i in range(count)]


@pytest.mark.parametrize("name", ["int8_gemv", "int8_tiled", "int4_gemv", "int4_tiled"])
def test_configs_from_the_space_agree(name):
    spec = get_kernel(name)
    m = 2 if name.endswith("gemv") else 20
    shape = (m, 40, 128) if name.startswith("int8") else (m, 40, 128, 64)
    configs = spec.configs(shape, torch.float32)
    assert configs and len(configs) < 100, f"{len(configs)} configs"
    inputs = _make_with_bias(name)(shape, torch.float32, CPU, 3)  # the spec's decode inputs have no bias
    ref = spec.reference(*to_float64(inputs))
    results = [spec.launch(*inputs, config=c) for c in _spread(configs, 3) + [spec.default_config(shape, torch.float32)]]
    for y in results:
        _check(y, ref, torch.float32)
        assert torch.allclose(y, results[0], rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Formats: packing, quantisers, transforms.quantize equivalence
# --------------------------------------------------------------------------------------------


def test_pack_unpack_round_trip_and_nibble_order():
    q = torch.randint(0, 16, (5, 12), dtype=torch.uint8)
    packed = qfmt.pack_int4(q)
    assert packed.shape == (5, 6) and packed.dtype == torch.uint8
    assert torch.equal(packed, q[:, 0::2] | (q[:, 1::2] << 4))  # low nibble = even k
    assert torch.equal(qfmt.unpack_int4(packed), q)
    every_byte = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(2, 128)
    assert torch.equal(qfmt.pack_int4(qfmt.unpack_int4(every_byte)), every_byte)
    with pytest.raises(ValueError, match="K even"):
        qfmt.pack_int4(torch.zeros(2, 3, dtype=torch.uint8))


def test_int8_quantiser_matches_transform():
    w = torch.randn(24, 40)
    for dtype in (torch.float32, torch.float16):
        q, s = q8.quantize_int8_per_channel(w, dtype)
        q_ref, s_ref = tq.quantize_int8_rowwise(w, dtype)
        assert torch.equal(q, q_ref) and torch.equal(s, s_ref) and s.dtype == dtype
        module = tq.Int8WeightOnlyLinear(q_ref, s_ref)
        x = torch.randn(3, 40, dtype=torch.float64)
        assert torch.allclose(q8.int8_reference(x, q, s.double()), x @ module.dequantized_weight(torch.float64).t())


def test_int4_quantiser_matches_transform():
    w = torch.randn(24, 128)
    for dtype in (torch.float32, torch.float16):
        packed, scales, zeros = q4.quantize_int4_groupwise(w, 32, dtype)
        codes, sz = tq.quantize_int4_groupwise(w, 32, dtype)
        assert torch.equal(qfmt.unpack_int4(packed), codes)
        assert scales.shape == zeros.shape == (24, 4) and scales.dtype == dtype
        # the same dequantised weight as the transform's reference layout
        mine = qfmt.int4_dequantize(packed, scales, zeros, 32, torch.float64)
        theirs = tq.int4_dequantize(tq.pack_int4(codes), sz, 32, torch.float64)
        assert torch.equal(mine, theirs)
        # and the transform's packed layout converts to this one
        p2, s2, z2 = qfmt.from_transform_int4(tq.pack_int4(codes), sz)
        assert torch.equal(p2, packed) and torch.equal(s2, scales) and torch.equal(z2, zeros)
    # the kernel on a transform-built module's buffers
    linear = torch.nn.Linear(64, 20)
    module = tq.Int4WeightOnlyLinear.from_linear(linear, group_size=32, layout="reference")
    x = torch.randn(2, 64)
    p, s, z = qfmt.from_transform_int4(module.weight, module.scales_and_zeros)
    y = q4.int4_weight_only_matmul(x, p, s, z, 32, module.bias)
    assert _rel_err(y, module(x).double()) < 1e-5


# --------------------------------------------------------------------------------------------
# Errors, registration
# --------------------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_value_errors():
    x = torch.randn(2, 64)
    (_, w, s, _), _ = _int8_case((2, 17, 64), torch.float32)
    with pytest.raises(ValueError, match=r"w_int8 is \(17, 64\)"):
        q8.int8_weight_only_matmul(torch.randn(2, 60), w, s)
    with pytest.raises(ValueError, match="int8"):
        q8.int8_weight_only_matmul(x, w.float(), s)
    with pytest.raises(ValueError, match="scales must have shape"):
        q8.int8_weight_only_matmul(x, w, s[:5])
    with pytest.raises(ValueError, match="path"):
        q8.int8_weight_only_matmul(x, w, s, config={"path": "nope"})
    with pytest.raises(ValueError, match="power of two"):
        q8.int8_weight_only_matmul(x, w, s, config={"path": "gemv", "BLOCK_K": 48})
    (_, wp, sc, ze, g, _), _ = _int4_case((2, 17, 64, 32), torch.float32)
    with pytest.raises(ValueError, match="must divide group_size=32"):
        q4.int4_weight_only_matmul(x, wp, sc, ze, g, config={"path": "gemv", "BLOCK_K": 64})
    with pytest.raises(ValueError, match="must divide group_size=32"):
        q4.int4_weight_only_matmul(x, wp, sc, ze, g, config={"path": "tiled", "BLOCK_K": 16})
    with pytest.raises(ValueError, match="not a multiple of group_size=48"):
        q4.int4_weight_only_matmul(x, wp, sc, ze, 48)
    with pytest.raises(ValueError, match="even integer"):
        q4.int4_weight_only_matmul(x, wp, sc, ze, 33)
    with pytest.raises(ValueError, match=r"expected \[N, 32\]"):
        q4.int4_weight_only_matmul(x, wp[:, :16], sc, ze, g)
    with pytest.raises(ValueError, match="scales must be"):
        q4.int4_weight_only_matmul(x, wp, sc.t(), ze, g)
    with pytest.raises(ValueError, match="multiple of group_size"):
        q4.quantize_int4_groupwise(torch.randn(4, 48), 32)


def test_four_specs_registered_with_costs():
    assert {"int8_gemv", "int8_tiled", "int4_gemv", "int4_tiled"} <= set(KERNELS)
    m, n, k, g = 1, 4096, 4096, 128
    assert get_kernel("int8_gemv").flops((m, n, k)) == 2 * m * n * k
    # the GEMVs are timed without a bias (llama's projections have none): weight, scales (and zeros), x, y
    assert get_kernel("int8_gemv").bytes((m, n, k), torch.float16) == n * k + n * 2 + k * 2 + n * 2
    assert get_kernel("int4_gemv").bytes((m, n, k, g), torch.float16) == n * k // 2 + 2 * n * (k // g) * 2 + k * 2 + n * 2
    assert get_kernel("int8_gemv").make_inputs((m, 8, 64), torch.float16, torch.device("cpu"), 0)[-1] is None
    assert get_kernel("int4_gemv").make_inputs((m, 8, 64, 32), torch.float16, torch.device("cpu"), 0)[-1] is None
    # the tiled kernels' inputs carry one, and their counts read it
    assert get_kernel("int8_tiled").bytes((m, n, k), torch.float16) == n * k + 2 * n * 2 + k * 2 + n * 2
    assert get_kernel("int4_tiled").bytes((m, n, k, g), torch.float16) == n * k // 2 + 2 * n * (k // g) * 2 + n * 2 + k * 2 + n * 2
    assert get_kernel("int4_tiled").make_inputs((m, 8, 64, 32), torch.float16, torch.device("cpu"), 0)[-1] is not None
    assert get_kernel("int8_gemv").bucket((3, n, k)) == "M4_N4096_K4096_v4"  # versioned: the GEMV kernels changed
    assert get_kernel("int4_gemv").bucket((1, n, k, g)) == "M1_N4096_K4096_G128_v15"  # the held tensor-core configs joined its space
    assert get_kernel("int4_gemv").bucket((1, 14336, k, g)) == "M1_N14336_K4096_G128_v14"  # not this one's (a grid of several waves)
    assert get_kernel("int8_tiled").bucket((3, n, k)) == "M4_N4096_K4096"
    assert get_kernel("int4_tiled").bucket((100, n, k, g)) == "M128_N4096_K4096_G128_v2"  # tiles over the tensor-core words joined the space
    for name, shape in (("int8_gemv", (1, n, k)), ("int4_gemv", (1, n, k, g)), ("int8_tiled", (512, n, k)), ("int4_tiled", (512, n, k, g))):
        spec = get_kernel(name)
        configs = spec.configs(shape, torch.bfloat16)
        assert 4 <= len(configs) <= 128, (name, len(configs))  # exhaustive at --max-trials 128
        if name.startswith("int4"):
            assert all(g % c["BLOCK_K"] == 0 or c["KERNEL"] in ("rows", "tc") and c["BLOCK_K"] % g == 0 and k % c["BLOCK_K"] == 0 for c in configs)


# --------------------------------------------------------------------------------------------
# GPU: bf16 numerics of the compiled kernels (skipped without CUDA)
# --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_gpu_kernels_match_reference(dtype, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # compile for the GPU (this module set it for the CPU tests)
    cuda = torch.device("cuda")
    tol = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}[dtype]
    for name in ("int8_gemv", "int8_tiled", "int4_gemv", "int4_tiled"):
        spec = get_kernel(name)
        for m, n, k in ((1, 4096, 4096), (5, 1000, 2048), (8, 4101, 384), (33, 1000, 2048), (300, 520, 1024)):
            if name.endswith("gemv") != (m <= 8):
                continue
            shape = (m, n, k, 128) if name.startswith("int4") else (m, n, k)
            inputs = _make_with_bias(name)(shape, dtype, cuda, 0)
            ref = spec.reference(*to_float64(inputs))
            configs = spec.configs(shape, dtype)
            variants = {c.get("KERNEL") for c in configs}  # int4 GEMV: the word, byte and tensor-core kernels each
            chosen = [c for v in variants for c in _spread([c for c in configs if c.get("KERNEL") == v], 2)]
            for cfg in chosen + [spec.default_config(shape, dtype)]:
                y = spec.launch(*inputs, config=cfg)
                torch.cuda.synchronize()
                assert torch.isfinite(y).all(), (name, shape, cfg)
                err = _rel_err(y, ref)
                assert err < tol, (name, shape, cfg, err)


@pytest.mark.parametrize("name", ["int8_gemv", "int4_gemv"])
def test_decode_gemv_inputs_have_no_bias(name):
    """The decode GEMVs are tuned and benchmarked as llama's projections run (no bias, as the peers):
    the registered specs' inputs carry None where a bias would be, and the kernels take it."""
    spec = get_kernel(name)
    shape = (1, 40, 128) if name.startswith("int8") else (1, 40, 128, 64)
    inputs = spec.make_inputs(shape, torch.float32, CPU, 0)
    assert inputs[-1] is None
    with_bias = _make_with_bias(name)(shape, torch.float32, CPU, 0)
    assert all(torch.equal(a, b) for a, b in zip(inputs[:-1], with_bias[:-1]) if torch.is_tensor(a))
    y = spec.launch(*inputs, config=spec.default_config(shape, torch.float32))
    _check(y, spec.reference(*to_float64(inputs)), torch.float32)


# --------------------------------------------------------------------------------------------
# Programmatic dependent launch: a GEMV reads x only after the kernel before it has ended
# --------------------------------------------------------------------------------------------

_CHAIN_CONFIGS = {
    "int8": {"path": "gemv", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 4},
    "int4 rows": {"path": "gemv", "KERNEL": "rows", "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 1, "PREFETCH": 1},
    "int4 tc": {"path": "gemv", "KERNEL": "tc", "BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 4, "PREFETCH": True},
}


@pytest.mark.parametrize("kind", list(_CHAIN_CONFIGS))
def test_gemv_chain_reads_each_previous_output(kind):
    """Four square GEMVs in a row, each reading the last one's output (as decode's projections
    follow each other), outputs poisoned with NaN first. On the GPU the chain is captured in a
    CUDA graph, where the kernels launch with PDL (Hopper) and start while the one before runs:
    a read of x before `_pdl_wait` would see NaN or the last replay's values. Each output must
    match the float64 reference of the previous output, over two replays with different inputs.
    Under the interpreter (no graph, no PDL: the GEMVs run one after another, a link the same code as
    the one before it) one pass of two 128 x 128 GEMVs, the second reading the first's output."""
    dtype = torch.bfloat16 if CPU.type == "cuda" else torch.float16
    n = 256 if ON_GPU else 128
    config = _CHAIN_CONFIGS[kind]
    # every weight row of unit norm: each output of the chain stays near unit scale
    if kind == "int8":
        _, w, _, _ = q8._make_int8_inputs((1, n, n), dtype, CPU, 1)
        s = (1 / w.double().norm(dim=1)).to(dtype)
        step = lambda x, out: q8.int8_weight_only_matmul(x, w, s, config=config, out=out)  # noqa: E731
        reference = lambda x: q8.int8_reference(x.double(), w, s.double())  # noqa: E731
    else:
        _, w, s, z, g, _ = q4._make_int4_inputs((1, n, n, 64), dtype, CPU, 1)
        norms = qfmt.int4_dequantize(w, s, z, g, torch.float64).norm(dim=1, keepdim=True)
        s, z = (s.double() / norms).to(dtype), (z.double() / norms).to(dtype)
        step = lambda x, out: q4.int4_weight_only_matmul(x, w, s, z, g, config=config, out=out)  # noqa: E731
        reference = lambda x: q4.int4_reference(x.double(), w, s.double(), z.double(), g)  # noqa: E731
    x = torch.randn(1, n, dtype=dtype, device=CPU)
    outs = [_poisoned(1, n, dtype).to(CPU) for _ in range(4 if ON_GPU else 2)]

    def chain():
        for i, out in enumerate(outs):
            step(x if i == 0 else outs[i - 1], out)

    replay = chain
    if CPU.type == "cuda":
        chain()  # compiled and warm before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain()
        replay = graph.replay
    for seed in (2, 3) if ON_GPU else (2,):
        x.copy_(torch.randn(1, n, generator=torch.Generator().manual_seed(seed), device="cpu").to(dtype))
        for out in outs:
            out.fill_(float("nan"))
        replay()
        if CPU.type == "cuda":
            torch.cuda.synchronize()
        for i, out in enumerate(outs):
            ref = reference(x if i == 0 else outs[i - 1])
            assert ref.abs().max() > 0.1, "the chain must not fade to zero (the check would be empty)"
            _check(out, ref, dtype)


def test_pdl_kernels_wait_before_reading_x(sass_runs):
    """Compiled for sm_90 with PDL (no GPU needed; a process without the interpreter), each GEMV has
    one griddepcontrol.wait (SASS ACQBULK), followed closely by launch_dependents (PREEXIT: the
    next kernel let in once this one runs), after its first weight reads and before every read of x: the int8 GEMV reads only its scales before it (x comes in
    the loop); the row kernel its bias and step 0's words; the tensor-core kernel its bias, step
    0's (s, z) pairs (8-byte) and words (16-byte loads) and no x pair (4-byte loads)."""
    import json

    for kernel in _PDL_ORDER_CASES:
        order = json.loads(sass_runs[f"pdl {kernel}"].strip().splitlines()[-1])
        before = order["loads_before_wait"]
        assert order["waits"] == 1 and order["triggers"] == 1 and 0 < order["trigger_after_wait"] < 64, (kernel, order)
        if kernel == "int8":
            assert before == ["LDG.E.U16"], before  # the scales ([BN], one element a thread)
        elif kernel == "rows":
            assert before[0] == "LDG.E.U16" and len(before) == 2 and before[1].startswith("LDG.E.64"), before  # bias, then words
        else:
            assert "LDG.E.EF.128" in before and "LDG.E.EL.64" in before, before  # words, (s, z) pairs
            assert not any(op in ("LDG.E.EL", "LDG.E.EL.CONSTANT") for op in before), before  # no x pair


def test_pdl_launch_arguments_follow_the_device_and_the_config(monkeypatch):
    """`pdl.pdl_options`: nothing off Hopper, under the interpreter or with AGNITRA_PDL=0; on a
    9.0+ GPU the kernel is told where to let the next kernel in (after its main loop by default,
    or after its wait) and launched with launch_pdl; config PDL False turns it off for one launch;
    any other value is refused with the choices named."""
    from agnitra.kernels import pdl

    cuda = torch.device("cuda", 0)
    assert not pdl.pdl_supported(torch.device("cpu"))
    assert pdl.pdl_unavailable(torch.device("cpu")) in ("Triton's interpreter runs no PTX", "it needs a CUDA GPU (this run is on cpu)")
    monkeypatch.setattr(pdl, "_capability", lambda index: (9, 0))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not pdl.pdl_supported(cuda), "the interpreter runs no PTX"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert pdl.pdl_supported(cuda)
    monkeypatch.setenv("AGNITRA_PDL", "0")
    assert not pdl.pdl_supported(cuda)
    assert pdl.pdl_unavailable(cuda) == "turned off (AGNITRA_PDL=0)"
    monkeypatch.delenv("AGNITRA_PDL")
    monkeypatch.setattr(pdl, "_capability", lambda index: (8, 0))
    assert not pdl.pdl_supported(cuda), "Ampere has no programmatic dependent launch"
    monkeypatch.setattr(pdl, "pdl_supported", lambda device: True)
    x = torch.zeros(1, 8)
    assert pdl.pdl_options(x, {}) == {"PDL": pdl.PDL_TRIGGERS["loop"], "launch_pdl": True}
    assert pdl.pdl_options(x, {"PDL": "wait"}) == {"PDL": pdl.PDL_TRIGGERS["wait"], "launch_pdl": True}
    assert pdl.pdl_options(x, {"PDL": False}) == {}
    with pytest.raises(ValueError, match="config PDL must be True, False or one of"):
        pdl.pdl_options(x, {"PDL": "start"})


def test_int4_tc_held_configs_join_the_space_only_where_one_wave_holds_them():
    """The held tensor-core configs (WARP_K, one step a program: every word read before the PDL wait)
    are offered where the grid is resident at once and a warp's step is 8-16 chunks, never elsewhere."""
    held = lambda n, k: [(c["BLOCK_K"], c["SPLIT_K"], c["num_warps"]) for c in q4.int4_gemv_configs((1, n, k, 128), torch.bfloat16) if c.get("WARP_K")]
    assert (4096, 1, 4) in held(4096, 4096) and (2048, 2, 2) in held(4096, 4096)
    assert all(4096 // split == bk and 8 <= bk // (64 * nw) <= 16 for bk, split, nw in held(4096, 4096))
    assert held(14336, 4096) == [] and held(4096, 14336) == [] and held(128256, 4096) == []  # several waves; K no power of two a program
    assert all(c.get("PDL") == "wait" for c in q4.int4_gemv_configs((1, 4096, 4096, 128), torch.bfloat16) if c.get("WARP_K"))
    assert not [c for c in q4.int4_gemv_configs((1, 4096, 4096, 128), torch.float32) if c.get("WARP_K")]  # no tensor cores for fp32 x

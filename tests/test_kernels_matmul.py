"""The Triton matmul with fused epilogue (agnitra.kernels.matmul).

CPU: Triton's interpreter (TRITON_INTERPRET=1, set here before triton is imported when there is no
GPU) at small sizes, fp32 and fp16 against a float64 reference (the interpreter's tl.dot is wrong
for bf16 operands). On a GPU the same tests run compiled, plus the `gpu` ones: bf16 numerics, and
4096^3 against torch.matmul (cuBLAS). The persistent TMA kernel (config TMA=True) runs the same
way: under the interpreter with INTERPRETER_SMS programs, each walking several tiles.
"""

from __future__ import annotations

import os

import torch  # (conftest imported it already; torch does not import triton)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

from pathlib import Path

import pytest

import agnitra.kernels.spec
from agnitra.kernels.matmul import (
    ACTIVATIONS,
    INTERPRETER_SMS,
    SMEM_LIMIT_BYTES,
    candidate_configs,
    fits_shared_memory,
    matmul,
    matmul_configs,
    matmul_default_config,
    matmul_reference,
    smem_bytes,
)
from agnitra.kernels.spec import KERNELS, interpreting, triton_available

CUDA = torch.cuda.is_available() and not interpreting()  # on a GPU the small tests run compiled too
DEVICE = torch.device("cuda" if CUDA else "cpu")
needs_triton = pytest.mark.skipif(not triton_available(DEVICE)[0], reason=triton_available(DEVICE)[1] or "no triton")
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (and TRITON_INTERPRET unset)")
# the interpreter's numpy warns when exp() overflows to inf inside sigmoid (inf is the right value)
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

SMALL = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}  # small blocks: several programs and K steps at these sizes
TOL = {torch.float32: 1e-5, torch.float16: 5e-3}  # max |err| / max |ref| vs float64 (fp32: IEEE, no tf32)


def _inputs(M, N, K, dtype, seed=0, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn((M, K), generator=g, device="cpu").to(device=device, dtype=dtype)  # [M, K]
    b = torch.randn((K, N), generator=g, device="cpu").to(device=device, dtype=dtype)  # [K, N]
    bias = torch.randn((N,), generator=g, device="cpu").to(device=device, dtype=dtype)  # [N]
    residual = torch.randn((M, N), generator=g, device="cpu").to(device=device, dtype=dtype)  # [M, N]
    return a, b, bias, residual


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-30)).item()


def _ref64(a, b, bias=None, activation=None, residual=None, b_transposed=False):
    d = lambda t: None if t is None else t.double()  # noqa: E731
    return matmul_reference(d(a), d(b), d(bias), activation, d(residual), b_transposed=b_transposed)


def _aligned_rows(t: torch.Tensor) -> torch.Tensor:
    """t's values in a view whose rows start 16 bytes apart (TMA's rule): rows padded when they must be."""
    per_16 = 16 // t.element_size()
    padded = torch.zeros((t.shape[0], -(-t.shape[1] // per_16) * per_16), dtype=t.dtype, device=t.device)
    padded[:, : t.shape[1]] = t
    return padded[:, : t.shape[1]]


# ------------------------------------------------------------------------------------------------
# numerics under the interpreter (fp32, fp16)
# ------------------------------------------------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(33, 47, 65), (64, 64, 64), (1, 1, 1), (96, 17, 9), (5, 96, 40)])
def test_matches_float64(dtype, shape):
    M, N, K = shape
    a, b, _, _ = _inputs(M, N, K, dtype)
    out = matmul(a, b, config=SMALL)
    assert out.shape == (M, N) and out.dtype == dtype
    assert torch.isfinite(out).all()
    assert _rel_err(out, _ref64(a, b)) < TOL[dtype]


@needs_triton
def test_fp32_default_is_ieee_accurate():
    a, b, _, _ = _inputs(48, 40, 96, torch.float32, seed=1)
    out = matmul(a, b)  # default config: ALLOW_TF32 False
    assert _rel_err(out, _ref64(a, b)) < 1e-6


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_b_transposed_and_strided_inputs(dtype):
    M, N, K = 33, 47, 65
    a, b, bias, _ = _inputs(M, N, K, dtype)
    ref = _ref64(a, b, bias)
    w = b.t().contiguous()  # [N, K]: nn.Linear's weight
    out_t = matmul(a, w, bias, b_transposed=True, config=SMALL)
    assert _rel_err(out_t, ref) < TOL[dtype]
    # F.linear's semantics, in the weight layout
    lin = torch.nn.functional.linear(a.double(), w.double(), bias.double())
    assert _rel_err(out_t, lin) < TOL[dtype]
    # non-contiguous views: a^T stored as [K, M], b as a column slice of a wider matrix
    a_view = a.t().contiguous().t()  # [M, K] with strides (1, M)
    b_wide = torch.zeros((K, N + 13), dtype=dtype, device=a.device)
    b_wide[:, 5 : 5 + N] = b
    b_view = b_wide[:, 5 : 5 + N]  # [K, N] with row stride N + 13
    out_v = matmul(a_view, b_view, bias, config=SMALL)
    assert _rel_err(out_v, ref) < TOL[dtype]


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
def test_bias_and_each_activation(dtype, activation):
    a, b, bias, _ = _inputs(40, 72, 33, dtype, seed=2)
    out = matmul(a, b, bias, activation, config=SMALL)
    assert _rel_err(out, _ref64(a, b, bias, activation)) < TOL[dtype]
    out_nobias = matmul(a, b, activation=activation, config=SMALL)
    assert _rel_err(out_nobias, _ref64(a, b, activation=activation)) < TOL[dtype]


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_residual_and_all_together(dtype):
    a, b, bias, residual = _inputs(50, 70, 90, dtype, seed=3)
    out = matmul(a, b, residual=residual, config=SMALL)
    assert _rel_err(out, _ref64(a, b, residual=residual)) < TOL[dtype]
    for activation in ACTIVATIONS:
        out = matmul(a, b.t().contiguous(), bias, activation, residual, config=SMALL, b_transposed=True)
        assert _rel_err(out, _ref64(a, b, bias, activation, residual)) < TOL[dtype], activation


@needs_triton
def test_residual_order_is_after_activation():
    # relu(x) + r differs from relu(x + r): a negative residual survives only if added after relu
    a = torch.zeros((4, 8), device=DEVICE)
    b = torch.zeros((8, 4), device=DEVICE)
    residual = -torch.ones((4, 4), device=DEVICE)
    out = matmul(a, b, activation="relu", residual=residual, config=SMALL)
    assert torch.equal(out, residual)


@needs_triton
@pytest.mark.parametrize(
    "dtype,out_dtype",
    [(torch.float16, torch.float32), (torch.float32, torch.float16), (torch.float32, torch.bfloat16), (torch.float16, torch.float16)],
)
def test_out_dtype(dtype, out_dtype):
    a, b, bias, residual = _inputs(33, 47, 65, dtype, seed=4)
    out = matmul(a, b, bias, "silu", residual, out_dtype=out_dtype, config=SMALL)
    assert out.dtype == out_dtype
    ref = _ref64(a, b, bias, "silu", residual)
    tol = {torch.float32: TOL[dtype], torch.float16: 5e-3, torch.bfloat16: 2e-2}[out_dtype]
    assert _rel_err(out, ref) < max(tol, TOL[dtype])
    if dtype == torch.float16 and out_dtype == torch.float32:  # fp32 output keeps the fp32 accumulator's bits
        assert _rel_err(out, ref) < 1e-5


@needs_triton
@pytest.mark.parametrize("epilogue", [False, True])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_split_k_matches_one_split(epilogue, out_dtype):
    a, b, bias, residual = _inputs(37, 45, 32 * 5 + 5, torch.float32, seed=5)  # 6 K-blocks, the last partial: split 4 masks two whole blocks
    kw = dict(bias=bias, activation="gelu", residual=residual) if epilogue else {}
    one = matmul(a, b, out_dtype=out_dtype, config=SMALL, **kw)
    ref = _ref64(a, b, **kw)
    for split_k in (2, 4):
        out = matmul(a, b, out_dtype=out_dtype, config={**SMALL, "SPLIT_K": split_k}, **kw)
        assert out.dtype == out_dtype
        assert _rel_err(out, one) < (1e-5 if out_dtype == torch.float32 else 2e-3), split_k
        assert _rel_err(out, ref) < (1e-5 if out_dtype == torch.float32 else 5e-3), split_k


@needs_triton
@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_poisoned_output_is_fully_written(split_k, out_dtype):
    M, N, K = 45, 39, 70
    a, b, bias, residual = _inputs(M, N, K, torch.float32, seed=6)
    for kw in ({}, dict(bias=bias, activation="relu", residual=residual)):
        out = torch.full((M, N), float("nan"), dtype=out_dtype, device=DEVICE)
        got = matmul(a, b, out_dtype=out_dtype, config={**SMALL, "SPLIT_K": split_k}, out=out, **kw)
        assert got is out
        assert not torch.isnan(out).any()
        assert _rel_err(out, _ref64(a, b, **kw)) < (1e-5 if out_dtype == torch.float32 else 5e-3)


@needs_triton
@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
def test_never_nan_on_large_values(activation):
    # accumulators of +-1e4 (fp32 inputs) push exp() in sigmoid/erf to overflow: results stay finite
    a, b, bias, _ = _inputs(16, 24, 32, torch.float32, seed=7)
    a = a * 100.0
    b = b * 20.0
    out = matmul(a, b, bias, activation, config=SMALL)
    assert not torch.isnan(out).any() and torch.isfinite(out).all()
    assert _rel_err(out, _ref64(a, b, bias, activation)) < 1e-5


@needs_triton
def test_several_configs_agree():
    shape = (96, 80, 72)
    a, b, bias, residual = _inputs(*shape, torch.float16, seed=8)
    ref = _ref64(a, b, bias, "gelu_tanh", residual)
    space = matmul_configs(shape, torch.float16)
    picked = [matmul_default_config(shape, torch.float16), space[0], space[len(space) // 2], space[-1],
              {**SMALL, "GROUP_M": 1}, {**SMALL, "GROUP_M": 2, "BLOCK_K": 64}, {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 16}]
    outs = [matmul(a, b, bias, "gelu_tanh", residual, config=c) for c in picked]
    for cfg, out in zip(picked, outs):
        assert _rel_err(out, ref) < 5e-3, cfg
        assert _rel_err(out, outs[0]) < 5e-3, cfg


@needs_triton
def test_zero_sized_dimensions():
    a = torch.randn((0, 8), device=DEVICE)
    b = torch.randn((8, 5), device=DEVICE)
    assert matmul(a, b).shape == (0, 5)
    a, b = torch.randn((3, 0), device=DEVICE), torch.randn((0, 5), device=DEVICE)
    bias = torch.randn((5,), device=DEVICE)
    out = matmul(a, b, bias, "relu", config=SMALL)  # K = 0: the epilogue of a zero product
    assert torch.allclose(out, torch.relu(bias).expand(3, 5))


@needs_triton
def test_bad_arguments_raise():
    a, b, bias, _ = _inputs(8, 6, 4, torch.float32)
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(a, b.t().contiguous())
    with pytest.raises(ValueError, match="activation"):
        matmul(a, b, activation="tanh")
    with pytest.raises(ValueError, match="dtype"):
        matmul(a, b.half())
    with pytest.raises(ValueError, match="bias"):
        matmul(a, b, bias=torch.zeros(7))
    with pytest.raises(ValueError, match="config"):
        matmul(a, b, config={"BLOCK_Q": 32})
    with pytest.raises(ValueError, match="power of two"):
        matmul(a, b, config={"BLOCK_M": 48})


# ------------------------------------------------------------------------------------------------
# the persistent TMA kernel (config TMA=True) under the interpreter (fp32, fp16)
# ------------------------------------------------------------------------------------------------

TMA_SMALL = {**SMALL, "TMA": True, "num_warps": 4}


# no dimension a multiple of the 32x32 tiles but K=96; under the interpreter half the cases: each dtype with each
# shape and with each layout of b ([K, N] rows padded to 16 bytes in both: fp16 200 -> 208 B, fp32 520 -> 528 B)
_TMA_CASES = [pytest.param(shape, dtype, b_transposed, id=f"{'x'.join(map(str, shape))}-{str(dtype)[6:]}-{'bt' if b_transposed else 'b'}")
              for shape in ((70, 100, 96), (45, 130, 72)) for dtype in (torch.float32, torch.float16) for b_transposed in (True, False)
              if CUDA or b_transposed == ((shape[0] == 70) == (dtype == torch.float32))]


@needs_triton
@pytest.mark.parametrize("shape,dtype,b_transposed", _TMA_CASES)
def test_tma_matches_float64(shape, dtype, b_transposed):
    M, N, K = shape
    assert -(-M // 32) * -(-N // 32) >= 2 * INTERPRETER_SMS  # several tiles a program (on the CPU)
    a, b, bias, residual = _inputs(M, N, K, dtype, seed=11)
    b_arg = b.t().contiguous() if b_transposed else _aligned_rows(b)  # [N, K] rows are aligned; [K, N] ones may not be
    cfg = TMA_SMALL
    out = matmul(a, b_arg, config=cfg, b_transposed=b_transposed)
    assert out.shape == (M, N) and out.dtype == dtype
    assert _rel_err(out, _ref64(a, b)) < TOL[dtype]
    poisoned = torch.full((M, N), float("nan"), dtype=dtype, device=a.device)  # every element is written
    matmul(a, b_arg, bias, "gelu_tanh", residual, config=cfg, b_transposed=b_transposed, out=poisoned)
    assert _rel_err(poisoned, _ref64(a, b, bias, "gelu_tanh", residual)) < TOL[dtype]


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_tma_epilogues_and_out_dtype_agree_with_the_pointer_kernel(dtype):
    """Each activation, and each output dtype (fp16 inputs: the activations take fp16 and fp32 outputs in
    turn; the activation is `_epilogue`'s, the pointer kernel's too, checked for each dtype by
    test_bias_and_each_activation)."""
    a, b, bias, residual = _inputs(40, 72, 48, dtype, seed=12)
    out_dtypes = [dtype, torch.float32] if dtype != torch.float32 else [dtype]
    for i, activation in enumerate(ACTIVATIONS):
        for out_dtype in out_dtypes if CUDA else [out_dtypes[i % len(out_dtypes)]]:
            kw = dict(bias=bias, activation=activation, residual=residual, out_dtype=out_dtype)
            tma = matmul(a, b, config=TMA_SMALL, **kw)
            assert tma.dtype == out_dtype
            assert _rel_err(tma, matmul(a, b, config=SMALL, **kw)) < TOL[dtype], (activation, out_dtype)
            assert _rel_err(tma, _ref64(a, b, bias, activation, residual)) < TOL[dtype], (activation, out_dtype)


@needs_triton
def test_tma_config_of_the_space_runs_at_a_small_shape():
    # the 4096^3 space's TMA tiles (128x256, 256x128) on a problem smaller than one tile in K and a few in M, N
    a, b, bias, _ = _inputs(130, 260, 64, torch.float16, seed=13)
    tma = [c for c in matmul_configs((4096, 4096, 4096), torch.float16) if c["TMA"]]
    for cfg in (tma[0], next(c for c in tma if c["BLOCK_M"] == 256)):
        out = matmul(a, b.t().contiguous(), bias, "relu", config=cfg, b_transposed=True)
        assert _rel_err(out, _ref64(a, b, bias, "relu")) < TOL[torch.float16], cfg


@needs_triton
def test_tma_refusals_name_the_fix():
    a, b, _, _ = _inputs(32, 48, 64, torch.float16)
    with pytest.raises(ValueError, match="SPLIT_K=2.*without TMA"):
        matmul(a, b, config={**TMA_SMALL, "SPLIT_K": 2})
    odd_k = torch.randn((32, 36), device=a.device).half()  # rows of 72 bytes
    with pytest.raises(ValueError, match="a's rows 16-byte aligned.*72 bytes.*without TMA"):
        matmul(odd_k, torch.randn((36, 48), device=a.device).half(), config=TMA_SMALL)
    with pytest.raises(ValueError, match="b's rows 16-byte aligned.*without TMA"):
        matmul(a, b[:, :44].contiguous(), config=TMA_SMALL)  # [K, N] rows of 88 bytes
    matmul(a, _aligned_rows(b[:, :44]), config=TMA_SMALL)  # the same values with rows 96 bytes apart: taken
    with pytest.raises(ValueError, match="unit last stride.*without TMA"):
        matmul(a.t().contiguous().t(), b, config=TMA_SMALL)  # [M, K] stored column-major
    offset = torch.empty(32 * 64 + 1, dtype=torch.float16, device=a.device)[1:].view(32, 64)  # 2 bytes off
    with pytest.raises(ValueError, match="base address 16-byte aligned.*without TMA"):
        matmul(offset, b, config=TMA_SMALL)
    big = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "TMA": True}
    with pytest.raises(ValueError, match="shared memory.*float32 output.*without TMA"):
        matmul(a, b, config=big, out_dtype=torch.float32)  # the epilogue's scratch grows with the output dtype
    with pytest.raises(ValueError, match="unknown matmul config keys.*WARP_SPECIALIZE"):
        matmul(a, b, config={**TMA_SMALL, "WARP_SPECIALIZE": True})  # tried and dropped: wrong results under Triton 3.6


@needs_triton
def test_tuned_tma_config_gives_way_where_the_tensors_break_its_rules():
    """A bucket's TMA winner reaching a K that is not a multiple of 8 (same power-of-two bucket):
    the problem's default (pointer) config runs instead; aligned tensors keep the TMA config."""
    from agnitra.kernels.matmul import config_for_tensors, matmul_default_config

    x, w = torch.randn(32, 60, device=DEVICE).half(), torch.randn(48, 60, device=DEVICE).half()  # weight [N, K]: rows of 120 bytes
    shape = (32, 48, 60)
    assert config_for_tensors(TMA_SMALL, shape, x, w, torch.float16) == matmul_default_config(shape, torch.float16)
    xa, wa = torch.randn(32, 64, device=DEVICE).half(), torch.randn(48, 64, device=DEVICE).half()
    assert config_for_tensors(TMA_SMALL, (32, 48, 64), xa, wa, torch.float16) is TMA_SMALL
    assert config_for_tensors(SMALL, shape, x, w, torch.float16) is SMALL
    out = matmul(x, w, None, "gelu", config=config_for_tensors(TMA_SMALL, shape, x, w, torch.float16), b_transposed=True)
    assert _rel_err(out, _ref64(x, w.t(), None, "gelu")) < TOL[torch.float16]


# ------------------------------------------------------------------------------------------------
# configuration space and registration (no kernel launches)
# ------------------------------------------------------------------------------------------------


def test_config_space_fits_shared_memory_and_excludes_what_does_not():
    big = (4096, 4096, 4096)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        space = matmul_configs(big, dtype)
        assert 20 <= len(space) <= 100, len(space)
        assert all(smem_bytes(c, dtype) <= SMEM_LIMIT_BYTES for c in space)
        assert len({tuple(sorted(c.items())) for c in space}) == len(space)  # no duplicates
        assert all(c["GROUP_M"] == 8 and c["num_warps"] in (4, 8) and c["num_stages"] in (3, 4, 5) for c in space)
        assert all(c["BLOCK_M"] in (32, 64, 128, 256) and c["BLOCK_N"] in (32, 64, 128, 256) and c["BLOCK_K"] in (32, 64, 128) for c in space)
    # 128x256x128 bf16, 3 stages: (128*128 + 128*256) * 2 B * 3 = 288 KB > 227 KB
    too_big = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 3}
    assert smem_bytes(too_big, torch.bfloat16) == 288 * 1024 and not fits_shared_memory(too_big, torch.bfloat16)
    candidates = candidate_configs(big)
    assert any(not fits_shared_memory(c, torch.float32) for c in candidates)  # fp32 needs twice the bytes
    assert len(matmul_configs(big, torch.float32)) < len(matmul_configs(big, torch.bfloat16))
    excluded = [c for c in candidates if not fits_shared_memory(c, torch.bfloat16)]
    assert excluded and not any(c in matmul_configs(big, torch.bfloat16) for c in excluded)


def test_default_config_and_split_k_candidates():
    big = (4096, 4096, 4096)
    d = matmul_default_config(big, torch.bfloat16)
    assert (d["BLOCK_M"], d["BLOCK_N"], d["BLOCK_K"], d["num_warps"], d["num_stages"], d["SPLIT_K"]) == (128, 256, 64, 8, 3, 1)
    for shape in [big, (16, 4096, 4096), (33, 47, 65), (1, 4096, 14336)]:
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            default = matmul_default_config(shape, dtype)
            assert fits_shared_memory(default, dtype)
            assert default in matmul_configs(shape, dtype)
    assert all(c["SPLIT_K"] == 1 for c in matmul_configs(big, torch.bfloat16))
    skinny = matmul_configs((16, 4096, 8192), torch.bfloat16)
    assert {c["SPLIT_K"] for c in skinny} == {1, 2, 4}
    assert all(c["BLOCK_M"] <= 32 for c in skinny)  # no 128-row blocks for 16 rows


def test_tma_configs_only_for_big_16_bit_problems():
    big = (4096, 4096, 4096)
    for dtype in (torch.float16, torch.bfloat16):
        tma = [c for c in matmul_configs(big, dtype) if c["TMA"]]
        tiles = {(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_stages"]) for c in tma}
        assert tiles == {(128, 256, 64, 3), (128, 128, 64, 4), (128, 128, 64, 5), (256, 128, 64, 3)}  # 128x256 s4 needs too much
        assert len(tma) == len(tiles)
        assert all(c["SPLIT_K"] == 1 and c["num_warps"] == 8 for c in tma)
        assert all(smem_bytes(c, dtype) <= SMEM_LIMIT_BYTES for c in tma)
        assert not matmul_default_config(big, dtype)["TMA"]
    assert not any(c["TMA"] for c in matmul_configs(big, torch.float32))
    for shape in [(512, 512, 512), (33, 47, 65), (16, 4096, 4096), (2048, 2048, 4096), (4096, 4096, 4095)]:  # small, skinny, misaligned K
        assert not any(c["TMA"] for c in matmul_configs(shape, torch.bfloat16)), shape
    assert {c["TMA"] for c in matmul_configs((8192, 8192, 1024), torch.bfloat16)} == {False, True}
    assert all(set(c) == set(matmul_default_config(big, torch.bfloat16)) for c in matmul_configs(big, torch.bfloat16))  # one key set
    # the TMA kernel keeps its pipeline through the epilogue: a C tile more
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "TMA": True}
    pipeline = (128 * 64 + 64 * 256) * 2 * 4
    assert smem_bytes(cfg, torch.bfloat16) == pipeline + 128 * 256 * 2 + 1024 > SMEM_LIMIT_BYTES  # 262,176 B measured: no launch
    assert smem_bytes({**cfg, "num_stages": 3}, torch.bfloat16) == pipeline * 3 // 4 + 128 * 256 * 2 + 1024 <= SMEM_LIMIT_BYTES
    assert smem_bytes({**cfg, "num_stages": 3}, torch.bfloat16, out_dtype=torch.float32) > SMEM_LIMIT_BYTES
    assert smem_bytes({**cfg, "TMA": False}, torch.bfloat16) == pipeline


def test_kernel_specs_registered():
    # importing agnitra.kernels.matmul registers both; the registry imports that module
    registry = Path(agnitra.kernels.spec.__file__).with_name("registry.py").read_text()
    assert "from agnitra.kernels import matmul" in registry
    mm = KERNELS["matmul"]
    fused = KERNELS["matmul_bias_gelu"]
    shape = (1000, 3000, 2000)
    assert mm.flops(shape) == 2 * 1000 * 3000 * 2000
    assert mm.bytes(shape, torch.bfloat16) == 2 * (1000 * 2000 + 2000 * 3000 + 1000 * 3000)
    assert mm.bucket(shape) == "M1024_N4096_K2048_v2"
    assert fused.bytes(shape, torch.float32) == 4 * (1000 * 2000 + 2000 * 3000 + 1000 * 3000 + 3000)
    assert fused.bucket(shape) == mm.bucket(shape)
    a, w, bias = fused.make_inputs((4, 6, 8), torch.float32, DEVICE, 0)
    assert a.shape == (4, 8) and w.shape == (6, 8) and bias.shape == (6,)


@needs_triton
@pytest.mark.parametrize("name", ["matmul", "matmul_bias_gelu"])
def test_kernel_specs_launch_matches_reference(name):
    spec = KERNELS[name]
    shape = (40, 56, 72)
    inputs = spec.make_inputs(shape, torch.float16, DEVICE, 0)
    out = spec.launch(*inputs, config=spec.default_config(shape, torch.float16))
    ref = spec.reference(*(t.double() for t in inputs))
    assert _rel_err(out, ref) < 5e-3
    again = spec.make_inputs(shape, torch.float16, DEVICE, 0)
    assert all(torch.equal(x, y) for x, y in zip(inputs, again))  # seeded


# ------------------------------------------------------------------------------------------------
# GPU: bf16, and against cuBLAS
# ------------------------------------------------------------------------------------------------


def _check_bf16_configs(shape, configs, seed):
    """Each config, plain and as nn.Linear + GELU + residual, against float64 in bf16."""
    M, N, K = shape
    a, b, bias, residual = _inputs(M, N, K, torch.bfloat16, seed=seed)
    a, b = a * K ** -0.25, b * K ** -0.25
    for cfg in configs:
        out = matmul(a, b, config=cfg)
        assert _rel_err(out, _ref64(a, b)) < 1e-2, cfg
        out = matmul(a, b.t().contiguous(), bias, "gelu", residual, config=cfg, b_transposed=True)
        assert _rel_err(out, _ref64(a, b, bias, "gelu", residual)) < 1e-2, cfg
        assert not torch.isnan(out).any()


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("shape", [(512, 384, 1024), (257, 515, 999), (16, 4096, 4096)])
def test_gpu_bf16_matches_float64(shape):
    configs = matmul_configs(shape, torch.bfloat16)
    _check_bf16_configs(shape, [matmul_default_config(shape, torch.bfloat16), *configs[:: max(1, len(configs) // 6)]], seed=9)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_4096_matches_torch_matmul(dtype):
    """The default and the TMA kernel at 4096^3 against cuBLAS (speed is the benchmarks' matter:
    benchmarks/kernels.py, tune-matmul, benchmarks/matmul_rounds.py)."""
    n = 4096
    a, b, _, _ = _inputs(n, n, n, dtype, seed=10)
    a, b = a * n ** -0.25, b * n ** -0.25
    ref = torch.matmul(a, b)
    assert _rel_err(matmul(a, b), ref) < 1e-2  # default config
    tma = {**matmul_default_config((n, n, n), dtype), "TMA": True}
    assert _rel_err(matmul(a, b, config=tma), ref) < 1e-2
    assert _rel_err(matmul(a, b.t().contiguous(), config=tma, b_transposed=True), ref) < 1e-2


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("shape", [(512, 384, 1024), (257, 520, 1000), (2048, 1536, 512)])
def test_gpu_tma_bf16_matches_float64(shape):
    """The 4096^3 space's TMA configs on smaller problems with edges (M = 257, K = 1000)."""
    _check_bf16_configs(shape, [c for c in matmul_configs((4096, 4096, 4096), torch.bfloat16) if c["TMA"]], seed=14)

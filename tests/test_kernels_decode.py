"""The fused decode-step kernels (agnitra.kernels.decode_layer) under Triton's interpreter.

Each against its float64 reference at sizes that are not multiples of the blocks, for fp32, fp16
and bf16 (these kernels use no tl.dot, so the interpreter computes bf16 right).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from agnitra.kernels import decode_layer as dl  # noqa: E402
from agnitra.kernels.spec import get_kernel  # noqa: E402

from kernel_device import DEVICE, each_config  # noqa: E402

pytestmark = pytest.mark.interpreter

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
IDS = ["fp32", "fp16", "bf16"]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
CFG = {"BLOCK_N": 8, "BLOCK_K": 32}  # every test shape is a partial block
PREFETCHED = {**CFG, "PREFETCH": True}


def _rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def _check(y, ref, dtype):
    assert torch.isfinite(y).all()
    assert _rel(y, ref) < TOL[dtype], f"relative error {_rel(y, ref):.2e}"


def _d(t):
    return None if t is None else t.double()


# every loop (plain, prefetching) x shape (batch 1 with K a whole number of steps; batch 3, a partial last step) x
# epilogue once, the dtypes taken in turn: each dtype meets every epilogue, both loops and both shapes (all of them on the GPU)
_NORM_GEMV_CASES = [(loop, shape, norm, residual) for loop in ("plain", "prefetch") for shape in ("1x17x96", "3x40x100")
                    for norm, residual in ((False, False), (True, False), (False, True), (True, True))]


@pytest.mark.parametrize("loop,shape,norm,residual,dtype", each_config(dict(zip(IDS, DTYPES)), _NORM_GEMV_CASES))
def test_norm_gemv_matches_reference(loop, shape, dtype, norm, residual):
    shape, cfg = tuple(int(n) for n in shape.split("x")), {"plain": CFG, "prefetch": PREFETCHED}[loop]
    x, w, s, g, eps, r = get_kernel("decode_gemv").make_inputs(shape, dtype, DEVICE, 0)
    g, r = (g if norm else None), (r if residual else None)
    y = dl.norm_gemv(x, w, s, g, eps, r, cfg)
    assert y.shape == shape[:2] and y.dtype == dtype
    _check(y, dl.norm_gemv_reference(x.double(), w, s.double(), _d(g), eps, _d(r)), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float"])
@pytest.mark.parametrize("cfg", [CFG, PREFETCHED], ids=["plain", "prefetch"])
def test_gated_norm_gemv_matches_reference(dtype, int8, cfg):
    x, w, s, g, eps = get_kernel("decode_gemv_gated").make_inputs((2, 21, 80), dtype, DEVICE, 1)
    if not int8:
        w, s = (w.float() * s.float()[:, None]).to(dtype), None
    y = dl.gated_norm_gemv(x, w, s, g, eps, cfg)
    assert y.shape == (2, 21)
    _check(y, dl.gated_norm_gemv_reference(x.double(), _d(w) if not int8 else w, _d(s), g.double(), eps), dtype)


def _rope_case(dtype, m=2, heads=4, kv_heads=2, d=16, k=48, slots=10, pos=5):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(m, k, generator=gen, device="cpu").to(dtype).to(DEVICE)
    w, s = dl._int8_rows((heads + 2 * kv_heads) * d, k, gen, DEVICE)
    g = (1 + 0.1 * torch.randn(k, generator=gen, device="cpu")).to(dtype).to(DEVICE)
    angles = torch.rand(d // 2, generator=gen, device="cpu") * 3
    caches = [torch.randn(m + 1, kv_heads, slots, d, generator=gen, device="cpu").to(dtype).to(DEVICE) for _ in range(2)]
    return x, w, s.to(dtype).to(DEVICE), g, angles.cos().to(DEVICE), angles.sin().to(DEVICE), torch.tensor([pos], device=DEVICE), caches, heads


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_qkv_rope_writes_the_cache_slot_and_returns_rotated_q(dtype):
    x, w, s, g, cos, sin, pos, (kc, vc), heads = _rope_case(dtype)
    kc_ref, vc_ref = kc.double().clone(), vc.double().clone()
    before = kc.clone()
    q = dl.qkv_rope_cache(x, w, s, g, 1e-5, cos, sin, pos, kc, vc, heads, PREFETCHED)
    q_ref = dl.qkv_rope_cache_reference(x.double(), w, s.double(), g.double(), 1e-5, cos.double(), sin.double(), pos, kc_ref, vc_ref, heads)
    _check(q, q_ref, dtype)
    _check(kc[:2, :, 5], kc_ref[:2, :, 5], dtype)
    _check(vc[:2, :, 5], vc_ref[:2, :, 5], dtype)
    untouched = torch.ones_like(kc, dtype=torch.bool)
    untouched[:2, :, 5] = False
    assert torch.equal(kc[untouched], before[untouched])  # only this step's slot of these rows


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("pos", [0, 6, 39])
def test_decode_attention_matches_reference(dtype, pos):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4 * 16, generator=gen, device="cpu").to(dtype).to(DEVICE)
    kc, vc = (torch.randn(2, 2, 40, 16, generator=gen, device="cpu").to(dtype).to(DEVICE) for _ in range(2))
    kc[:, :, pos + 1 :] = float("nan")  # slots past the position are never read
    vc[:, :, pos + 1 :] = float("nan")
    at = torch.tensor([pos], device=DEVICE)
    o = dl.decode_attention(q, kc, vc, at, 4, {"BLOCK_S": 16, "num_warps": 2})
    _check(o, dl.decode_attention_reference(q.double(), kc.double(), vc.double(), at, 4), dtype)


def test_shape_and_format_errors_name_the_problem():
    x, w, s, g, eps, r = get_kernel("decode_gemv").make_inputs((1, 8, 32), torch.float32, DEVICE, 0)
    with pytest.raises(ValueError, match="int8 weights need per-row scales"):
        dl.norm_gemv(x, w, None)
    with pytest.raises(ValueError, match="weight must be"):
        dl.norm_gemv(x, w[:, :16], s)
    with pytest.raises(ValueError, match="even number of rows"):
        dl.gated_norm_gemv(x, w[:7], s[:7])
    with pytest.raises(ValueError, match=r"expected q\|k\|v"):
        dl.qkv_rope_cache(x, w, s, g, eps, g[:8], g[:8], torch.tensor([0]), torch.zeros(1, 2, 4, 16), torch.zeros(1, 2, 4, 16), 4)


def test_default_config_covers_the_gpu_with_programs():
    assert dl.default_config((1, 2048, 2048), torch.bfloat16)["BLOCK_N"] == 4  # 512 programs
    assert dl.default_config((1, 32000, 2048), torch.bfloat16)["BLOCK_N"] == 32
    assert dl.default_config((1, 64, 96), torch.bfloat16)["BLOCK_N"] == 4  # never below 4
    space = dl.configs((1, 2048, 2048), torch.bfloat16)
    assert dl.default_config((1, 2048, 2048), torch.bfloat16) in space
    assert all(1024 <= c["BLOCK_N"] * c["BLOCK_K"] <= 16384 and c["BLOCK_K"] <= 2048 for c in space)

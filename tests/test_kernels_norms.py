"""Fused norms (agnitra.kernels.norms) and gated activations (agnitra.kernels.gated_mlp) on the CPU
through Triton's interpreter, against PyTorch references computed in float64.

bf16 in the interpreter: loads and fp32 arithmetic are exact, but its fp32 -> bf16 cast rounds
toward zero where a GPU rounds to nearest even (checked by hand: half of random values differ by
one ulp). bf16 results here are therefore up to about one ulp a rounding further from exact than on
a GPU, and the bf16 bounds below allow for that.
"""

from __future__ import annotations



import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

from agnitra.errors import NotApplicable  # noqa: E402
from agnitra.kernels import gated_mlp, norms  # noqa: E402
from agnitra.kernels.spec import KERNELS  # noqa: E402
from agnitra.models.llama import RMSNorm  # noqa: E402
from kernel_device import DEVICE, ON_GPU  # noqa: E402

pytestmark = pytest.mark.interpreter

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ERROR = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}  # relative L2 vs float64
# elementwise against eager PyTorch in the same dtype: fp16 rounds as PyTorch does; bf16 is off by
# the interpreter's truncating casts (up to ~3 ulps over two roundings; h = x + residual rounds too)
EAGER = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float16: dict(rtol=1e-3, atol=1e-5), torch.bfloat16: dict(rtol=2.5e-2, atol=1e-2)}
EPS = 1e-5

SINGLE = {"BLOCK_N": 128, "ROWS_PER_PROGRAM": 4, "num_warps": 4}  # N = 100 fits: one pass
CHUNKED = {"BLOCK_N": 64, "ROWS_PER_PROGRAM": 2, "num_warps": 2}  # 2 chunks, the second partial (36 columns)


def _randn(shape, dtype, seed, scale=1.0, shift=0.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, device="cpu") * scale + shift).to(DEVICE, dtype)


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm()).item()


def _poisoned(like: torch.Tensor) -> torch.Tensor:
    return torch.full_like(like, float("nan"))


def _distinct_launches(configs: list[dict]) -> list[dict]:
    """`configs`, under the interpreter those that differ only in num_warps once: it is a launch option
    the interpreter drops (the same computation); every one on the GPU."""
    if ON_GPU:
        return configs
    distinct = {}
    for config in configs:
        distinct.setdefault(tuple(sorted((k, v) for k, v in config.items() if k != "num_warps")), config)
    return list(distinct.values())


def _check_h(h: torch.Tensor, x: torch.Tensor, r: torch.Tensor) -> None:
    if x.dtype == torch.bfloat16:  # one truncating cast in the interpreter
        torch.testing.assert_close(h, x + r, rtol=2**-7, atol=0)
    else:
        assert torch.equal(h, x + r)


# -- norms ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [SINGLE, CHUNKED], ids=["single-pass", "chunked"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["rms_norm", "rms_norm_residual", "layer_norm", "layer_norm_residual"])
def test_norm_matches_float64_reference(kind, dtype, config):
    shape = (3, 5, 100)  # 15 rows (not a multiple of ROWS_PER_PROGRAM), N = 100 (not a power of two)
    layer, residual = kind.startswith("layer"), kind.endswith("residual")
    x = _randn(shape, dtype, 0, shift=0.5 if layer else 0.0)
    r = _randn(shape, dtype, 1) if residual else None
    w = _randn((100,), dtype, 2, scale=0.1, shift=1.0)
    b = _randn((100,), dtype, 3, scale=0.1)
    out, h_out = _poisoned(x), _poisoned(x)
    kw = dict(config=config, out=out, residual_out=h_out if residual else None)
    if layer:
        got = norms.layer_norm(x, w, b, EPS, r, **kw)
        ref64 = norms.layer_norm_reference(x.double(), w.double(), b.double(), EPS, None if r is None else r.double())
        eager = norms.layer_norm_reference(x, w, b, EPS, r)
    else:
        got = norms.rms_norm(x, w, EPS, r, **kw)
        ref64 = norms.rms_norm_reference(x.double(), w.double(), EPS, None if r is None else r.double())
        eager = norms.rms_norm_reference(x, w, EPS, r)
    y = got[0] if residual else got
    assert y is out and y.dtype == dtype and y.shape == shape
    assert not y.isnan().any(), "output not fully written"
    assert _rel(y, ref64[0] if residual else ref64) < ERROR[dtype]
    torch.testing.assert_close(y, eager[0] if residual else eager, **EAGER[dtype])
    if residual:
        assert got[1] is h_out and not h_out.isnan().any()
        _check_h(h_out, x, r)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_equals_llama_rmsnorm(dtype):
    torch.manual_seed(0)
    norm = RMSNorm(384, EPS)  # the tinylm width
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.1)
    norm = norm.to(dtype)
    x, attn = _randn((2, 3, 384), dtype, 4), _randn((2, 3, 384), dtype, 5)
    with torch.no_grad():
        y = norms.rms_norm(x, norm.weight, EPS)
        torch.testing.assert_close(y, norm(x), **EAGER[dtype])
        if dtype == torch.float16:  # the casts in llama's order: rounding once at the end would differ in ~25%
            assert (y != norm(x)).float().mean().item() < 0.01
        # Block: h = x + attention(...); ffn_norm(h) -- fused
        y, h = norms.rms_norm(attn, norm.weight, EPS, residual=x)
        _check_h(h, attn, x)
        torch.testing.assert_close(y, norm(h), **EAGER[dtype])
        # the chunked path as well
        y2 = norms.rms_norm(x, norm.weight, EPS, config={"BLOCK_N": 128, "ROWS_PER_PROGRAM": 1, "num_warps": 4})
        torch.testing.assert_close(y2, norm(x), **EAGER[dtype])


@pytest.mark.parametrize("kind", ["rms_norm_residual", "layer_norm_residual"])
def test_every_config_gives_the_same_result(kind):
    spec = KERNELS[kind]
    shape = (13, 200)
    inputs = spec.make_inputs(shape, torch.float32, DEVICE, 0)
    space = spec.configs(shape, torch.float32)
    space += [{"BLOCK_N": b, "ROWS_PER_PROGRAM": r, "num_warps": 4} for b, r in ((32, 4), (128, 1))]  # chunked: 7 chunks or 2, the last partial
    assert spec.default_config(shape, torch.float32) in space
    space = _distinct_launches(space)
    first = spec.launch(*inputs, config=space[0]).clone()
    assert _rel(first, spec.reference(*(t.double() for t in inputs))) < ERROR[torch.float32]
    for config in space[1:]:
        inputs[-1].fill_(float("nan"))
        torch.testing.assert_close(spec.launch(*inputs, config=config), first, rtol=1e-6, atol=1e-6, msg=lambda m: f"{config}: {m}")


@pytest.mark.parametrize("config", [SINGLE, CHUNKED], ids=["single-pass", "chunked"])
def test_layer_norm_statistics_are_stable(config):
    # mean 100, std 1: E[x^2] - E[x]^2 in fp32 loses ~5e-4 here; the kernel's statistics must not
    x = _randn((7, 100), torch.float32, 6, shift=100.0)
    w, b = _randn((100,), torch.float32, 7, 0.1, 1.0), _randn((100,), torch.float32, 8, 0.1)
    ref = F.layer_norm(x.double(), (100,), w.double(), b.double(), EPS)
    assert _rel(norms.layer_norm(x, w, b, EPS, config=config), ref) < 2e-5


def test_in_place_residual_and_optional_affine():
    x, r = _randn((5, 100), torch.float16, 9), _randn((5, 100), torch.float16, 10)
    w = _randn((100,), torch.float16, 11, 0.1, 1.0)
    expected_y, expected_h = norms.rms_norm_reference(x, w, EPS, r)
    y, h = norms.rms_norm(x, w, EPS, residual=r, config=CHUNKED, residual_out=r)  # the stream updated in place
    assert h is r and torch.equal(h, expected_h)
    torch.testing.assert_close(y, expected_y, **EAGER[torch.float16])
    x32 = x.float()
    torch.testing.assert_close(norms.layer_norm(x32, None, None, EPS), F.layer_norm(x32, (100,), eps=EPS), **EAGER[torch.float32])


def test_norm_edge_cases(monkeypatch):
    w = torch.ones(8)
    assert norms.rms_norm(torch.empty(0, 8), w, EPS).shape == (0, 8)
    with pytest.raises(ValueError, match="weight"):
        norms.rms_norm(torch.randn(2, 8), torch.ones(7), EPS)
    with pytest.raises(ValueError, match="residual"):
        norms.rms_norm(torch.randn(2, 8), w, EPS, residual=torch.randn(2, 8).half())
    with pytest.raises(ValueError, match="power of two"):
        norms.rms_norm(torch.randn(2, 8), w, EPS, config={"BLOCK_N": 12, "ROWS_PER_PROGRAM": 1, "num_warps": 4})
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(NotApplicable, match="CUDA"):  # CPU tensors without the interpreter
        norms.rms_norm(torch.randn(2, 8, device="cpu"), w.cpu(), EPS)


def test_norm_specs():
    assert {"rms_norm", "rms_norm_residual", "layer_norm", "layer_norm_residual"} <= set(KERNELS)
    shape = (8192, 4096)
    assert KERNELS["rms_norm_residual"].bytes(shape, torch.bfloat16) == (4 * 8192 * 4096 + 4096) * 2
    assert KERNELS["layer_norm"].bytes(shape, torch.float32) == (2 * 8192 * 4096 + 2 * 4096) * 4
    assert KERNELS["rms_norm"].flops(shape) == 4 * 8192 * 4096
    assert KERNELS["layer_norm_residual"].flops(shape) == 9 * 8192 * 4096
    for n in (64, 100, 4096, 5000, 16384, 65536):  # the default is one of the configurations tried
        for name in ("rms_norm", "layer_norm"):
            spec = KERNELS[name]
            assert spec.default_config((512, n), torch.bfloat16) in spec.configs((512, n), torch.bfloat16)
    assert norms.default_config((8192, 4096), torch.bfloat16)["BLOCK_N"] == 4096  # one pass
    assert norms.default_config((4, 65536), torch.bfloat16)["BLOCK_N"] < 65536  # chunked


@pytest.mark.parametrize("name", ["rms_norm", "rms_norm_residual", "layer_norm", "layer_norm_residual", "silu_mul", "gelu_mul"])
def test_spec_launch_matches_reference(name):
    spec = KERNELS[name]
    shape = (11, 72)
    inputs = spec.make_inputs(shape, torch.bfloat16, DEVICE, 0)
    out = spec.launch(*inputs, config=spec.default_config(shape, torch.bfloat16))
    assert _rel(out, spec.reference(*(t.double() for t in inputs))) < ERROR[torch.bfloat16]


# -- gated activations -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", gated_mlp.ACTIVATIONS)
def test_gated_activation(activation, dtype):
    a, b = _randn((3, 5, 200), dtype, 12, scale=2.0), _randn((3, 5, 200), dtype, 13)
    ref64 = gated_mlp.gated_activation_reference(a.double(), b.double(), activation)
    eager = gated_mlp.gated_activation_reference(a, b, activation)
    config = {"BLOCK_M": 4, "BLOCK_H": 64, "num_warps": 2}  # 15 rows, 200 columns: partial tiles both ways
    out = _poisoned(a)
    y = gated_mlp.gated_activation(a, b, activation, config, out=out)
    assert y is out and not y.isnan().any()
    assert _rel(y, ref64) < ERROR[dtype]
    torch.testing.assert_close(y, eager, **EAGER[dtype])
    packed = gated_mlp.gated_activation_packed(torch.cat([a, b], dim=-1), activation)  # fused w1|w3 output
    assert packed.shape == a.shape and torch.equal(packed, gated_mlp.gated_activation(a, b, activation))


def test_gated_configs_and_specs():
    shape = (16, 14336)
    a, b = KERNELS["silu_mul"].make_inputs((16, 1000), torch.float32, DEVICE, 0)
    space = _distinct_launches(gated_mlp.configs((16, 1000), torch.float32))
    first = gated_mlp.gated_activation(a, b, config=space[0])
    for config in space[1:]:
        assert torch.equal(gated_mlp.gated_activation(a, b, config=config), first), config
    assert gated_mlp.default_config(shape, torch.bfloat16) in gated_mlp.configs(shape, torch.bfloat16)
    assert KERNELS["silu_mul"].flops(shape) == 5 * 16 * 14336
    assert KERNELS["gelu_mul"].bytes(shape, torch.bfloat16) == 3 * 16 * 14336 * 2
    with pytest.raises(ValueError, match="even"):
        gated_mlp.gated_activation_packed(torch.randn(2, 7))
    with pytest.raises(ValueError, match="activation"):
        gated_mlp.gated_activation(a, b, "relu")


_PDL_ORDER_SCRIPT = r"""
import json, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, sys.argv[1])
import sass_loop
from agnitra.kernels import gated_mlp, norms
bf16 = "*bf16"
cases = {
    "rms": (norms._rms_norm_kernel, {"HAS_RESIDUAL": True, "BLOCK_N": 1024, "ROWS_PER_PROGRAM": 1, "SINGLE_PASS": True}),
    "layer": (norms._layer_norm_kernel, {"HAS_RESIDUAL": False, "HAS_WEIGHT": True, "HAS_BIAS": True, "BLOCK_N": 1024, "ROWS_PER_PROGRAM": 1, "SINGLE_PASS": True}),
    "gated": (gated_mlp._gated_activation_kernel, {"ACTIVATION": "silu", "BLOCK_M": 1, "BLOCK_H": 1024}),
}
out = {}
for name, (kernel, consts) in cases.items():
    consts = {**consts, "PDL": 2}
    sig = {n: "constexpr" if n in consts else bf16 if n.endswith("_ptr") else "fp32" if n == "eps" else "i32" for n in kernel.arg_names}
    compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"]); f.flush()
        out[name] = sass_loop.pdl_order(subprocess.run([sass_loop._tool("nvdisasm"), f.name], capture_output=True, text=True, check=True).stdout)
print(json.dumps(out))
"""


def test_norm_and_gated_kernels_wait_before_any_read():
    """Compiled for sm_90 with PDL at trigger point "wait" (no GPU needed; a process without the
    interpreter): the RMSNorm, LayerNorm and gated-activation kernels read only what earlier kernels
    write, so one griddepcontrol.wait (SASS ACQBULK) comes before every global load, and the next
    kernel is let in (PREEXIT) right after it."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(root / "src"), TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run([sys.executable, "-c", _PDL_ORDER_SCRIPT, str(root / "tests")], capture_output=True, text=True, env=env, timeout=300)
    if run.returncode and ("ptxas" in run.stderr or "backend" in run.stderr.lower()):
        pytest.skip(f"cannot compile for sm_90 here: {run.stderr.strip().splitlines()[-1][:160]}")
    assert run.returncode == 0, run.stderr[-2000:]
    for name, order in json.loads(run.stdout.strip().splitlines()[-1]).items():
        assert order["waits"] == 1 and order["loads_before_wait"] == [] and order["triggers"] == 1 and 0 < order["trigger_after_wait"] < 32, (name, order)

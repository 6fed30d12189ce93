"""Quantisation and sparsity transforms on the CPU: int8/int4 weight-only, dynamic int8, fp8 (its
math, through torch._scaled_mm's CPU kernel) and 2:4 pruning; fp8 and 2:4 sparsity refuse the CPU.

Error bounds on the tiny zoo models (random N(0, 0.02) weights, fp32), relative L2 error of the
outputs: int8 rounds each weight to within s/2 with s = row max / 127, an RMS weight error of
about 1% of the weights' scale per layer; 2e-2 leaves room for the few layers compounding
(measured ~2e-3). int4 with groups of 32 has s = group range / 15, an RMS weight error of ~9%
per layer, damped by the residual stream; 1e-1 is the bound (measured ~3e-2). Dynamic int8 adds
per-tensor 8-bit activations: 2e-2 (measured ~4e-3).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agnitra.errors import NotApplicable, UserError
from agnitra.transforms import quantize as q
from agnitra.transforms.base import TRANSFORMS, TransformContext, get_transform
from agnitra.transforms.patcher import apply_recipe
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.registry import BuildOptions, build_workload

CPU = torch.device("cpu")
NAMES = ("int8-weight-only", "int4-weight-only", "dynamic-int8", "fp8", "sparsity-2of4")


@pytest.fixture(scope="module")
def tinylm():
    return build_workload("tinylm", BuildOptions(size="tiny"))


@pytest.fixture(scope="module")
def bert():
    return build_workload("bert-base", BuildOptions(size="tiny"))


def _run(workload, model=None):
    model = model or workload.model
    with torch.no_grad():
        return model(*workload.example_inputs).double()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _snapshot(model: nn.Module) -> dict:
    return {name: (m, m.weight, m.weight.detach().clone()) for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def _assert_untouched(model: nn.Module, before: dict) -> None:
    after = dict(model.named_modules())
    for name, (module, weight, values) in before.items():
        assert after[name] is module and type(module) is nn.Linear, name
        assert module.weight is weight and torch.equal(weight, values), name


def _apply(workload, name: str, params: dict | None = None, device=CPU):
    return apply_recipe(Recipe.of((name, dict(params or {}))), TransformContext(workload, device))


def _apply_steps(workload, *steps, device=CPU):
    return apply_recipe(Recipe.of(*steps), TransformContext(workload, device))


def _converted(model: nn.Module, cls: type) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, cls)]


def test_registered_as_module_transforms():
    for name in NAMES:
        assert name in TRANSFORMS and TRANSFORMS[name].stage == "module", name
        assert TRANSFORMS[name].description and TRANSFORMS[name].requires


# (transform, params, module class, bound, layers converted on tinylm without its LM head / on bert)
CASES = [
    ("int8-weight-only", {}, q.Int8WeightOnlyLinear, 2e-2, 14, 12),
    ("int4-weight-only", {"group_size": 32}, q.Int4WeightOnlyLinear, 1e-1, 14, 12),
    ("dynamic-int8", {}, q.DynamicInt8Linear, 2e-2, 14, 12),
]


@pytest.mark.parametrize("workload_name", ["tinylm", "bert"])
@pytest.mark.parametrize("name, params, cls, bound, n_tinylm, n_bert", CASES, ids=[c[0] for c in CASES])
def test_quantised_model_close_and_user_model_untouched(request, workload_name, name, params, cls, bound, n_tinylm, n_bert):
    workload = request.getfixturevalue(workload_name)
    params = dict(params, skip="output") if workload_name == "tinylm" else params  # LM head: see the KV-cache test
    before = _snapshot(workload.model)
    reference = _run(workload)

    patched = _apply(workload, name, params)
    out = _run(workload, patched.model)

    _assert_untouched(workload.model, before)
    assert torch.equal(_run(workload), reference)  # the user's model computes what it did
    converted = _converted(patched.model, cls)
    assert len(converted) == (n_tinylm if workload_name == "tinylm" else n_bert)
    remaining = [n for n, m in patched.model.named_modules() if type(m) is nn.Linear]
    assert remaining == (["output"] if workload_name == "tinylm" else [])
    error = _rel(out, reference)
    assert 0 < error < bound, f"{name} on {workload_name}: relative error {error:.2e}"
    for module in converted:
        weight = module.qlinear.weight() if cls is q.DynamicInt8Linear else module.weight
        assert weight.dtype in (torch.int8, torch.uint8, torch.int32, torch.qint8), weight.dtype
        assert not list(module.parameters(recurse=False))


def test_skip_leaves_named_layers_as_linear(tinylm, bert):
    patched = _apply(tinylm, "int8-weight-only", {"skip": "output"})
    assert type(patched.model.output) is nn.Linear and patched.model.output is not tinylm.model.output
    assert isinstance(patched.model.layers[0].attention.wq, q.Int8WeightOnlyLinear)

    patched = _apply(bert, "int8-weight-only", {"skip": "attention, intermediate"})
    for name, module in patched.model.named_modules():
        if "attention." in name and name.endswith(("query", "key", "value", "dense")) or "intermediate.dense" in name:
            assert type(module) is nn.Linear, name
    assert len(_converted(patched.model, q.Int8WeightOnlyLinear)) == 2  # the two output.dense
    with pytest.raises(NotApplicable, match="named in skip"):
        _apply(bert, "int8-weight-only", {"skip": "bert"})


def test_min_features_leaves_small_layers(tinylm):
    patched = _apply(tinylm, "int8-weight-only", {"skip": "output", "min_features": 64})
    # wk, wv are 64 -> 32: left alone; wq, wo, w1, w2, w3 of the 2 layers converted
    assert len(_converted(patched.model, q.Int8WeightOnlyLinear)) == 10
    assert type(patched.model.layers[0].attention.wk) is nn.Linear


def test_decoder_with_quantised_lm_head(tinylm):
    """The LM head quantised too: the decoder's fresh KV cache must stay in the model's float dtype."""
    patched = _apply(tinylm, "int8-weight-only")
    assert isinstance(patched.model.output, q.Int8WeightOnlyLinear)
    cache = patched.model.layers[0].attention.kv_cache.k_cache
    assert cache.dtype == torch.float32
    assert _rel(_run(tinylm, patched.model), _run(tinylm)) < 2e-2


@pytest.mark.parametrize("name, params", [("int8-weight-only", {}), ("int4-weight-only", {"group_size": 32})])
def test_after_precision_bf16(bert, name, params):
    """precision first (the fast CPU kernels are the bf16 ones): scales follow the converted weights."""
    patched = _apply_steps(bert, "precision", (name, params))
    converted = [m for m in patched.model.modules() if isinstance(m, (q.Int8WeightOnlyLinear, q.Int4WeightOnlyLinear))]
    assert len(converted) == 12
    assert all((getattr(m, "scales", None) if name.startswith("int8") else m.scales_and_zeros).dtype == torch.bfloat16 for m in converted)
    assert _rel(_run(bert, patched.model), _run(bert)) < 2e-2


def test_int4_skips_layers_not_divisible_by_group(tinylm):
    patched = _apply(tinylm, "int4-weight-only")  # group 128: only w2 (in_features 128) qualifies
    converted = _converted(patched.model, q.Int4WeightOnlyLinear)
    assert len(converted) == 2 and all(m.in_features == 128 and m.layout == "cpu" for m in converted)
    with pytest.raises(NotApplicable, match="group_size 256"):
        _apply(tinylm, "int4-weight-only", {"group_size": 256})
    with pytest.raises(UserError, match="group_size must be one of"):  # the parameter alone is wrong: a user error
        _apply(tinylm, "int4-weight-only", {"group_size": 48})


def test_parameters_validated(tinylm):
    with pytest.raises(UserError, match="no parameter"):
        _apply(tinylm, "int8-weight-only", {"bits": 8})
    with pytest.raises(UserError, match="should be int"):
        _apply(tinylm, "int4-weight-only", {"group_size": "32"})
    with pytest.raises(UserError, match="should be str"):
        _apply(tinylm, "dynamic-int8", {"skip": ["output"]})
    with pytest.raises(NotApplicable, match="min_features"):
        _apply(tinylm, "int8-weight-only", {"min_features": 0})


@pytest.mark.parametrize("name", ["fp8", "sparsity-2of4"])
def test_gpu_only_transforms_refuse_the_cpu(tinylm, name):
    with pytest.raises(NotApplicable, match="CUDA"):
        _apply(tinylm, name)


def test_dynamic_int8_takes_fp32_only():
    workload = build_workload("tinylm", BuildOptions(size="tiny", dtype=torch.bfloat16))
    with pytest.raises(NotApplicable, match="fp32"):
        _apply(workload, "dynamic-int8")


# ---- the modules against their references --------------------------------------------------


def _linear(k: int, n: int, bias: bool = True, dtype=torch.float32, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    linear = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        linear.bias.normal_() if bias else None
    return linear.to(dtype)


def test_int8_quantiser_bounds():
    w = torch.randn(19, 37, dtype=torch.float64).float()
    w[3] = 0  # an all-zero row must not divide by zero
    qw, scales = q.quantize_int8_rowwise(w)
    assert qw.dtype == torch.int8 and scales.shape == (19,)
    assert qw.abs().max() <= 127 and torch.equal(qw[3], torch.zeros_like(qw[3]))
    assert torch.equal(qw.abs().amax(dim=1)[torch.arange(19) != 3], torch.full((18,), 127, dtype=torch.int8))
    error = (w - qw.float() * scales[:, None]).abs()
    assert (error <= scales[:, None] / 2 * (1 + 1e-5)).all()


@pytest.mark.parametrize("k, n, dtype, tol", [(37, 19, torch.float32, 1e-5), (48, 40, torch.bfloat16, 1e-2), (37, 24, torch.bfloat16, 1e-2)])
def test_int8_linear_matches_dequantised_reference(k, n, dtype, tol):
    linear = _linear(k, n, dtype=dtype)
    module = q.Int8WeightOnlyLinear.from_linear(linear)
    assert module.weight.dtype == torch.int8 and module.scales.dtype == dtype
    assert "int8" in repr(module) and not list(module.parameters())
    x = torch.randn(2, 3, k).to(dtype)  # [..., K]: the Linear's call semantics
    y = module(x)
    assert y.shape == (2, 3, n) and y.dtype == dtype
    reference = x.double() @ module.dequantized_weight(torch.float64).T + module.bias.double()
    assert _rel(y, reference) < tol
    assert _rel(y, linear(x).detach()) < 2e-2  # and close to the float layer


def test_int4_quantiser_bounds_and_packing():
    w = torch.randn(24, 96)
    w[5, :32] = 0.25  # a constant group
    codes, sz = q.quantize_int4_groupwise(w, 32)
    assert codes.dtype == torch.uint8 and codes.max() <= 15 and sz.shape == (3, 24, 2)
    packed = q.pack_int4(codes)
    assert packed.shape == (24, 48) and packed.dtype == torch.uint8
    assert torch.equal(q.unpack_int4(packed), codes)
    assert torch.equal(packed[0, 0], (codes[0, 0] << 4) | codes[0, 1])
    error = (w - q.int4_dequantize(packed, sz, 32)).abs().reshape(24, 3, 32)
    assert (error <= sz[..., 0].t()[..., None] / 2 + 1e-6).all()
    assert torch.allclose(q.int4_dequantize(packed, sz, 32)[5, :32], w[5, :32])


@pytest.mark.parametrize("k, n, group, dtype, tol", [(96, 48, 32, torch.float32, 1e-5), (128, 32, 64, torch.bfloat16, 1e-2), (256, 16, 128, torch.float32, 1e-5)])
def test_int4_linear_matches_reference(k, n, group, dtype, tol):
    linear = _linear(k, n, dtype=dtype)
    module = q.Int4WeightOnlyLinear.from_linear(linear, group)
    reference_module = q.Int4WeightOnlyLinear.from_linear(linear, group, layout="reference")
    assert module.layout == "cpu" and reference_module.layout == "reference"
    assert module.weight.dtype == torch.uint8 and module.weight.numel() == n * k // 2
    x = torch.randn(2, 3, k).to(dtype)
    y = module(x)
    assert y.shape == (2, 3, n) and y.dtype == dtype
    codes, sz = q.quantize_int4_groupwise(linear.weight, group)
    x2d = x.reshape(-1, k).double()
    reference = (q.int4_reference_matmul(x2d, q.pack_int4(codes), sz.double(), group) + linear.bias.double()).reshape(2, 3, n)
    assert _rel(y, reference) < tol
    assert _rel(reference_module(x), reference) < tol
    assert _rel(y, linear(x).detach()) < 0.2  # int4: about 9% RMS weight error


def test_quantised_modules_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    model = nn.Sequential(q.Int8WeightOnlyLinear.from_linear(_linear(64, 64)), q.Int4WeightOnlyLinear.from_linear(_linear(64, 32, seed=1), 32))
    x = torch.randn(3, 64)
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    assert _rel(compiled(x), model(x)) < 1e-5


def test_prune_2of4_keeps_the_two_largest_of_every_four():
    w = torch.randn(8, 32)
    w[0, :4] = torch.tensor([0.5, -0.5, 0.5, 0.1])  # a tie: still exactly two kept
    original = w.clone()
    pruned, mask = q.prune_2of4(w)
    assert torch.equal(w, original) and pruned.data_ptr() != w.data_ptr()
    groups, kept = w.abs().reshape(8, 8, 4), mask.reshape(8, 8, 4)
    assert (kept.sum(-1) == 2).all()
    smallest_kept = torch.where(kept, groups, torch.inf).amin(-1)
    largest_dropped = torch.where(kept, -torch.inf, groups).amax(-1)
    assert (smallest_kept >= largest_dropped).all()
    assert torch.equal(pruned, w * mask) and (pruned[~mask] == 0).all()
    with pytest.raises(ValueError, match="divisible by 4"):
        q.prune_2of4(torch.randn(4, 6))


# ---- fp8: its math runs on the CPU through torch._scaled_mm's CPU kernel ------------------------


def test_fp8_linear_matches_its_float_reference():
    linear = _linear(64, 48, dtype=torch.bfloat16)
    module = q.Fp8Linear.from_linear(linear)
    assert module.weight.dtype == torch.float8_e4m3fn and module.weight_scale.shape == (1, 48)
    x = torch.randn(2, 5, 64).to(torch.bfloat16)
    y = module(x)
    assert y.shape == (2, 5, 48) and y.dtype == torch.bfloat16
    x8, sx = q.quantize_fp8_rowwise(x.reshape(-1, 64))
    reference = (x8.double() * sx.double()) @ (module.weight.double() * module.weight_scale.double().T).T
    assert _rel(y, reference.reshape(2, 5, 48) + linear.bias.double()) < 1e-2  # bf16 output rounding
    assert _rel(y, linear(x).detach()) < 0.1  # e4m3: 3 mantissa bits on both operands


def test_fp8_transform_through_private_cpu_flag(monkeypatch):
    monkeypatch.setattr(q, "_FP8_ALLOW_CPU", True)
    workload = build_workload("tinylm", BuildOptions(size="tiny", dtype=torch.bfloat16))
    before = _snapshot(workload.model)
    patched = _apply(workload, "fp8", {"skip": "output"})
    _assert_untouched(workload.model, before)
    assert len(_converted(patched.model, q.Fp8Linear)) == 14
    assert _rel(_run(workload, patched.model), _run(workload)) < 0.1


# ---- CUDA paths (skipped on the CPU) --------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
def test_cuda_int8_and_int4_match_references():
    device = torch.device("cuda")
    linear = _linear(256, 96, dtype=torch.bfloat16).to(device)
    x = torch.randn(3, 256, device=device, dtype=torch.bfloat16)
    int8 = q.Int8WeightOnlyLinear.from_linear(linear)
    reference = x.double() @ int8.dequantized_weight(torch.float64).T + int8.bias.double()
    assert _rel(int8(x), reference) < 1e-2
    int4 = q.Int4WeightOnlyLinear.from_linear(linear, 64)
    assert int4.layout == "cuda" and int4.weight.dtype == torch.int32
    codes, sz = q.quantize_int4_groupwise(linear.weight, 64, torch.bfloat16)
    reference = q.int4_reference_matmul(x.double(), q.pack_int4(codes), sz.double(), 64) + linear.bias.double()
    assert _rel(int4(x), reference) < 1e-2


@cuda
def test_cuda_fp8_and_sparsity_modules():
    device = torch.device("cuda")
    linear = _linear(256, 128, dtype=torch.bfloat16).to(device)
    x = torch.randn(4, 256, device=device, dtype=torch.bfloat16)
    if torch.cuda.get_device_capability() >= (8, 9):
        assert _rel(q.Fp8Linear.from_linear(linear)(x), linear(x).detach()) < 0.1
    if torch.cuda.get_device_capability() >= (8, 0):
        sparse = q.SemiSparseLinear.from_linear(linear)
        pruned, _ = q.prune_2of4(linear.weight)
        assert _rel(sparse(x), x.double() @ pruned.double().T + linear.bias.double()) < 1e-2


# --------------------------------------------------------------------------------------------
# fuse-projections: stacked q|k|v and gate|up, alone and before a quantiser
# --------------------------------------------------------------------------------------------


def test_fuse_projections_computes_the_same_and_leaves_the_user_model_alone(tinylm):
    from agnitra.models.llama import StackedFeedForward, StackedQKVAttention

    before = _snapshot(tinylm.model)
    patched = apply_recipe(Recipe.of("fuse-projections"), TransformContext(tinylm, CPU))
    layer = patched.model.layers[0]
    assert isinstance(layer.attention, StackedQKVAttention) and isinstance(layer.feed_forward, StackedFeedForward)
    assert _rel(_run(tinylm, patched.model), _run(tinylm)) < 1e-5  # fp32: the same rows, one GEMM
    _assert_untouched(tinylm.model, before)


def test_fuse_projections_before_int8_quantises_the_same_rows(tinylm):
    stacked = apply_recipe(Recipe.of("fuse-projections", "int8-weight-only"), TransformContext(tinylm, CPU))
    separate = apply_recipe(Recipe.of("int8-weight-only"), TransformContext(tinylm, CPU))
    assert type(stacked.model.layers[0].attention.wqkv).__name__ == "Int8WeightOnlyLinear"
    assert _rel(_run(tinylm, stacked.model), _run(tinylm, separate.model)) < 1e-5


def test_fuse_projections_needs_projections_and_to_come_first(tinylm, bert):
    get_transform("fuse-projections").check(TransformContext(bert, CPU), None)  # BERT's q|k|v stack too
    resnet = build_workload("resnet50", BuildOptions(size="tiny"))
    with pytest.raises(NotApplicable, match="no Llama attention or feed-forward, nor transformers 5 encoder"):
        get_transform("fuse-projections").check(TransformContext(resnet, CPU), None)
    with pytest.raises(NotApplicable, match="before it"):
        apply_recipe(Recipe.of("int8-weight-only", "fuse-projections"), TransformContext(tinylm, CPU))

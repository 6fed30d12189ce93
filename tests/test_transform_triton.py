"""The `triton-kernels` transform under Triton's interpreter (CPU): module swaps and numerics."""

from __future__ import annotations



import pytest
import torch

from agnitra.errors import NotApplicable
from agnitra.kernels import modules as km
from agnitra.models.generate import Generator, random_prompt
from agnitra.models.llama import StackedQKVAttention
from agnitra.transforms import Recipe, TransformContext
from agnitra.transforms.patcher import apply_recipe
from agnitra.workloads.registry import BuildOptions, build_workload


@pytest.fixture(scope="module")
def tinylm():
    return build_workload("tinylm", BuildOptions(size="tiny"))


_FEW_PROGRAMS = ("decode_gemv", "decode_gemv_gated", "int8_gemv")


@pytest.fixture(scope="module", autouse=True)
def _gemvs_of_few_programs():
    """The decode GEMVs with 32 outputs a program. Their defaults fill a GPU (at least 512 programs:
    4-8 outputs a program at tinylm's sizes), and the interpreter runs a grid's programs one after
    another at Python speed: eight times the programs made a decode step ~4 s instead of ~0.5 s.
    These tests check the transform's modules and the numbers they compute; the kernels' configs,
    defaults included, are tests/test_kernels_*'s subject (partial blocks there)."""
    from agnitra.kernels import ops

    tuned = ops.config_for

    def config_for(kernel, shape, dtype, device_type):
        config = tuned(kernel, shape, dtype, device_type)
        return {**config, "BLOCK_N": 32} if kernel in _FEW_PROGRAMS else config

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ops, "config_for", config_for)
        yield


def _logits(model, patched=None):
    # a prefill of 3, then 2 decode steps (the second reads the cache slot the first wrote): each a second or more under the interpreter
    prompt = random_prompt(1, 3, 256, seed=0, device="cpu")
    if patched is None:
        return Generator(model).teacher_forced_logits(prompt, prompt)
    return Generator(patched.model).teacher_forced_logits(prompt, prompt)


@pytest.fixture(scope="module")
def logits_of(tinylm):
    """The logits of `triton-kernels` with these params on tinylm, each computed once for the module
    (the recipe is deterministic; its logits take ~10 s under the interpreter)."""
    cache = {}

    def of(**params):
        key = tuple(sorted(params.items()))
        if key not in cache:
            cache[key] = _logits(tinylm.model, _apply(tinylm, **params))
        return cache[key]

    return of


def _apply(w, **params):
    recipe = Recipe.from_dict(Recipe.of(("triton-kernels", params)).to_dict())
    return apply_recipe(recipe, TransformContext(w, torch.device("cpu")))


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_norm_and_mlp_kernels_keep_the_function(tinylm):
    patched = _apply(tinylm, weights="keep", fuse=False, decode=False)
    block = patched.model.layers[0]
    assert isinstance(block, km.TritonLlamaBlock)  # residual add fused into the FFN norm
    assert isinstance(block.attention_norm, km.TritonRMSNorm) and isinstance(block.feed_forward, km.TritonFeedForward)
    assert _rel(_logits(tinylm.model, patched), _logits(tinylm.model)) < 1e-5  # fp32
    assert type(tinylm.model.layers[0]).__name__ == "Block"  # the user's model keeps its modules


def test_int8_kernels_compute_what_int8_weight_only_does(tinylm, logits_of):
    triton = _apply(tinylm, weights="int8")
    attention = triton.model.layers[0].attention
    assert isinstance(attention, StackedQKVAttention) and isinstance(attention.wqkv, km.TritonInt8Linear)
    reference = apply_recipe(Recipe.from_dict(Recipe.of("int8-weight-only").to_dict()), TransformContext(tinylm, torch.device("cpu")))
    a, b = logits_of(weights="int8"), _logits(tinylm.model, reference)
    assert _rel(a, b) < 1e-4  # same quantisation, different kernels
    assert 1e-4 < _rel(a, _logits(tinylm.model)) < 3e-2


def test_stacked_projections_compute_what_separate_ones_do(tinylm, logits_of):
    fused, separate = _apply(tinylm, weights="int8", decode=False), _apply(tinylm, weights="int8", fuse=False, decode=False)
    layer = fused.model.layers[0]
    assert isinstance(layer.feed_forward, km.TritonStackedFeedForward) and isinstance(separate.model.layers[0].attention.wq, km.TritonInt8Linear)
    cfg = tinylm.model.config
    assert layer.attention.wqkv.out_features == (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    assert layer.feed_forward.w13.out_features == 2 * cfg.ffn_dim
    assert _rel(logits_of(weights="int8", decode=False), logits_of(weights="int8", fuse=False, decode=False)) < 1e-5  # same rows, one launch
    names = dict(fused.model.named_modules())
    assert "layers.0.attention.wo" in names and "layers.0.attention.wq" not in names


def test_concat_outputs_stacks_rows_and_refuses_mixed_kinds():
    gen = torch.Generator().manual_seed(0)
    linears = [torch.nn.Linear(64, n, bias=True) for n in (16, 48)]
    for lin in linears:
        lin.weight.data = torch.randn(lin.weight.shape, generator=gen)
    x = torch.randn(3, 64, generator=gen)
    int8 = [km.TritonInt8Linear.from_linear(lin) for lin in linears]
    assert torch.allclose(km.concat_outputs(int8)(x), torch.cat([m(x) for m in int8], dim=-1), rtol=1e-5, atol=1e-5)
    int4 = [km.TritonInt4Linear.from_linear(lin, 32) for lin in linears]
    assert torch.allclose(km.concat_outputs(int4)(x), torch.cat([m(x) for m in int4], dim=-1), rtol=1e-5, atol=1e-5)
    half = [km.TritonInt4Linear.from_linear(torch.nn.Linear(128, n).to(torch.float16), 64) for n in (80, 40)]  # words only; bytes and words
    assert half[0].weight is None and half[1].weight is not None
    xh = torch.randn(2, 128).to(torch.float16)
    assert torch.allclose(km.concat_outputs(half)(xh), torch.cat([m(xh) for m in half], dim=-1), rtol=2e-3, atol=2e-3)
    assert not km.stackable([int8[0], int4[1]]) and not km.stackable([int8[0], linears[1]])
    with pytest.raises(ValueError, match="one kind"):
        km.concat_outputs([int8[0], int4[1]])


def test_int8_modules_of_an_earlier_step_move_onto_the_kernels_without_copies(tinylm):
    patched = apply_recipe(Recipe.from_dict(Recipe.of("int8-weight-only", ("triton-kernels", {"weights": "keep", "decode": False})).to_dict()), TransformContext(tinylm, torch.device("cpu")))
    wqkv = patched.model.layers[0].attention.wqkv  # moved onto the kernels, then stacked
    assert isinstance(wqkv, km.TritonInt8Linear) and wqkv.weight.dtype == torch.int8


def test_int4_kernels_and_skip(tinylm):
    patched = _apply(tinylm, weights="int4", group_size=32, skip="output", decode=False)
    assert isinstance(patched.model.layers[1].feed_forward.w2, km.TritonInt4Linear)
    assert type(patched.model.output).__name__ == "Linear"
    assert _rel(_logits(tinylm.model, patched), _logits(tinylm.model)) < 0.2


def test_int4_notes_name_the_tensor_core_copy_where_it_is_kept(tinylm):
    """16-bit int4 layers keep their weights shuffled for the tensor-core GEMV, small ones the packed
    bytes as well: the recipe's notes say so; fp32 layers (no tensor-core GEMV) and int8 ones keep no
    such copy and say nothing."""
    from types import SimpleNamespace

    from agnitra.transforms import get_transform

    t = get_transform("triton-kernels")
    cpu, bf16 = torch.device("cpu"), SimpleNamespace(dtype=torch.bfloat16)  # what notes look at: the workload's dtype
    (note,) = t.notes(TransformContext(bf16, cpu), t.parse_params({"weights": "int4"}))
    assert "keep their weights once" in note and "also keep the packed bytes" in note
    assert t.notes(TransformContext(tinylm, cpu), t.parse_params({"weights": "int4"})) == []  # fp32
    assert t.notes(TransformContext(bf16, cpu), t.parse_params({"weights": "int8"})) == []
    assert t.notes(TransformContext(bf16, cpu), t.parse_params({"weights": "int4", "group_size": 32})) == []  # groups the tc kernel cannot take
    patched = _apply(tinylm, weights="int4", group_size=32, decode=False)
    layer = patched.model.layers[1].feed_forward.w2
    assert layer.tc_words is None  # fp32: no copy, as the note says


def test_not_applicable_without_gpu_or_interpreter(tinylm, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(NotApplicable, match="CUDA GPUs"):
        _apply(tinylm, weights="int8")


def test_nothing_to_replace_is_not_applicable():
    """ResNet-50's modules (tiny widths), not calibrated: building the zoo's workload runs 64 images
    through it twice to set its BatchNorm statistics and head (~5 s of CPU), which change no module."""
    from agnitra.models.resnet import PRESETS, ResNet, random_images
    from agnitra.workloads.base import TaskKind, Workload

    cfg = PRESETS["tiny"]
    w = Workload("resnet50", ResNet(cfg).eval(), (random_images(1, cfg.image_size, 0, "cpu", channels=cfg.in_channels),), TaskKind.CLASSIFIER)
    with pytest.raises(NotApplicable, match="no Linear, norm or MLP"):
        _apply(w, weights="keep", norms=False, mlp=False)


@pytest.mark.slow
def test_kernels_inside_a_compiled_decode_step(tinylm, logits_of):
    patched = apply_recipe(Recipe.from_dict(Recipe.of(("triton-kernels", {"weights": "int8"}), "compile").to_dict()), TransformContext(tinylm, torch.device("cpu")))
    assert _rel(_logits(tinylm.model, patched), logits_of(weights="int8")) < 1e-4  # against the same kernels run eagerly


def test_fuse_projections_then_kernels_stack_before_quantising(tinylm, logits_of):
    patched = apply_recipe(Recipe.from_dict(Recipe.of("fuse-projections", ("triton-kernels", {"weights": "int8"})).to_dict()), TransformContext(tinylm, torch.device("cpu")))
    layer = patched.model.layers[0]
    assert isinstance(layer.attention.wqkv, km.TritonInt8Linear) and isinstance(layer.feed_forward, km.TritonStackedFeedForward)
    assert _rel(_logits(tinylm.model, patched), logits_of(weights="int8")) < 1e-5


def test_decode_kernels_compute_what_the_unfused_step_does(tinylm, logits_of):
    from agnitra.kernels import decode_modules as dm

    fused = _apply(tinylm, weights="int8")
    assert all(isinstance(layer, dm.TritonDecodeBlock) for layer in fused.model.layers)
    assert isinstance(fused.model.norm, dm.FoldedRMSNorm) and isinstance(fused.model.output, dm.NormedOutput)
    # prefill runs the block's modules, decode steps the fused kernels; both fill and read one cache
    assert _rel(logits_of(weights="int8"), logits_of(weights="int8", decode=False)) < 1e-4


def test_decode_kernels_with_float_weights_and_two_sequences(tinylm):
    patched = _apply(tinylm, weights="keep")  # q|k|v and w1|w3 stacked as float Linears
    assert isinstance(patched.model.layers[0].attention, StackedQKVAttention)
    prompt = random_prompt(2, 3, 256, seed=1, device="cpu")
    tinylm.model.setup_caches(2, 16)
    patched.model.setup_caches(2, 16)
    try:
        ref = Generator(tinylm.model).teacher_forced_logits(prompt, prompt)
        got = Generator(patched.model).teacher_forced_logits(prompt, prompt)
    finally:
        spec = tinylm.decoder
        tinylm.model.setup_caches(spec.batch, spec.max_seq_len)
    assert _rel(got, ref) < 1e-5  # fp32: the fused step is the same function


def test_decode_says_why_it_cannot_fuse(tinylm):
    with pytest.raises(NotApplicable, match="decode=true: .*set decode=false"):
        _apply(tinylm, weights="int4", group_size=32)
    with pytest.raises(NotApplicable, match="not stacked"):
        _apply(tinylm, weights="int8", fuse=False)

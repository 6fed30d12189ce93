"""The recipe space's size: each choice checked once, combinations composed without checking
again, counts that follow from the dimensions, and a limit that says what it left out.

The CUDA context is a fake Hopper GPU (torch.cuda.get_device_capability answers (9, 0)): the
transforms' checks read the capability only, and nothing here runs on it.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from agnitra.errors import NotApplicable, UserError
from agnitra.search.space import recipe_space, space_size
from agnitra.transforms import threads as threads_module
from agnitra.transforms.base import TRANSFORMS, TransformContext
from agnitra.transforms.recipe import Step
from agnitra.workloads.registry import BuildOptions, build_workload

CUDA, CPU = torch.device("cuda"), torch.device("cpu")
GPU_SET = {"compile", "fuse-projections", "int8-weight-only", "int4-weight-only", "fp8", "sparsity-2of4", "mixed-precision"}


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))


@pytest.fixture(scope="module")
def llama_bf16():
    return build_workload("llama-1b", BuildOptions(size="tiny", dtype=torch.bfloat16))


@pytest.fixture(scope="module")
def llama_fp32():
    return build_workload("llama-1b", BuildOptions(size="tiny"))


def test_a_llama_on_a_gpu_has_the_points_its_dimensions_make(hopper, llama_bf16):
    ctx = TransformContext(llama_bf16, CUDA)
    size = space_size(ctx, allowed=GPU_SET)
    # compile: 4 modes x freezing x PDL off x coordinate descent off (decoders: no dynamic shapes);
    # int8 / int4 (g32, g64, g128) / fp8: with and without the LM head; mixed-precision: 12 (low,
    # group, high) pairs x (6 fractions + 4 error budgets)
    assert size.dimensions == {"compile": 32, "fuse-projections": 1, "int8-weight-only": 2, "int4-weight-only": 6, "fp8": 2, "sparsity-2of4": 1, "mixed-precision": 120}
    weight_formats = 2 + 6 + 2 + 1 + 120  # one exclusive group: at most one of them
    heads = (1 + weight_formats) * (1 + 1)  # x fuse-projections or not
    assert size.points == heads * (1 + 32) - 1 == 8711  # x compile or not, the empty recipe left out
    ranked, _ = recipe_space(ctx, allowed=GPU_SET)
    assert len(ranked) == size.points
    assert len({c.recipe.key() for c in ranked}) == len(ranked)
    assert [c.prior for c in ranked] == sorted((c.prior for c in ranked), reverse=True)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton-kernels needs Triton installed")
def test_the_full_gpu_space_of_a_llama_is_over_ten_thousand(hopper, llama_bf16, builtin_transforms_only):
    size = space_size(TransformContext(llama_bf16, CUDA))
    assert size.dimensions["triton-kernels"] >= 1
    assert size.points > 10**4  # measured 13067 (2026-11-26): the kernels' choices on top of the weight formats
    assert size.grid > 10**6


def test_each_choice_is_checked_once(hopper, llama_bf16, monkeypatch):
    calls = []
    compile_transform = TRANSFORMS["compile"]
    original = type(compile_transform).check
    monkeypatch.setattr(type(compile_transform), "check", lambda self, ctx, params: (isinstance(ctx, TransformContext) and calls.append(params)) or original(self, ctx, params))
    ranked, _ = recipe_space(TransformContext(llama_bf16, CUDA), allowed=GPU_SET)
    assert len(ranked) == 8711
    assert len(calls) == 32  # once per choice on this context (parse_params' probes aside), not once per recipe holding it


def test_a_cpu_llama_counts_threads_and_conflicts(llama_fp32, monkeypatch):
    monkeypatch.setattr(threads_module, "physical_cores", lambda: 8)
    monkeypatch.setattr(threads_module, "_usable_cpus", lambda: list(range(16)))
    allowed = {"compile", "threads", "precision", "int8-weight-only", "dynamic-int8"}
    size = space_size(TransformContext(llama_fp32, CPU), allowed=allowed)
    assert size.dimensions == {"compile": 4, "threads": 3, "precision": 1, "int8-weight-only": 2, "dynamic-int8": 1}
    heads = 2 * 4 - 1  # precision or not x (none, int8, int8 without the head, dynamic int8); dynamic int8 refuses precision
    tails = 1 + 4 + 3  # none, compile, threads: not both, a decoder's compiled decode step is traced whole and never sets the count
    assert size.points == heads * tails - 1 == 55
    ranked, _ = recipe_space(TransformContext(llama_fp32, CPU), allowed=allowed)
    assert not [c for c in ranked if {"compile", "threads"} <= {s.transform for s in c.recipe.steps}]
    assert TRANSFORMS["threads"].conflict(None, [Step("compile", {})], TransformContext(llama_fp32, CPU)).startswith("a decoder's compiled decode step is traced whole")


def test_a_limit_keeps_the_best_and_says_what_it_left_out(hopper, llama_bf16):
    ctx = TransformContext(llama_bf16, CUDA)
    full, _ = recipe_space(ctx, allowed=GPU_SET)
    ranked, skipped = recipe_space(ctx, allowed=GPU_SET, limit=100)
    assert [c.recipe.key() for c in ranked] == [c.recipe.key() for c in full[:100]]
    assert [s.reason for s in skipped if s.transform == "space"] == ["8611 recipes of lowest prior left out: the space is limited to 100 recipes (limit=)"]


def test_runtime_choices_refuse_the_wrong_device_with_reasons(hopper, llama_fp32, monkeypatch):
    compile_t, threads_t, graphs, tf32 = TRANSFORMS["compile"], TRANSFORMS["threads"], TRANSFORMS["cuda-graphs"], TRANSFORMS["tf32"]
    decoder_cpu = TransformContext(llama_fp32, CPU)
    with pytest.raises(NotApplicable, match="dynamic=true does not apply"):
        compile_t.check(decoder_cpu, compile_t.parse_params({"dynamic": True}))
    with pytest.raises(NotApplicable, match="no CUDA graphs: max-autotune-no-cudagraphs is max-autotune"):
        compile_t.check(decoder_cpu, compile_t.parse_params({"mode": "max-autotune-no-cudagraphs"}))
    with pytest.raises(NotApplicable, match="matters on the CPU; this run is on CUDA"):
        threads_t.check(TransformContext(llama_fp32, CUDA), threads_t.parse_params({"count": 1}))
    monkeypatch.setattr(threads_module, "_usable_cpus", lambda: [0, 1])
    with pytest.raises(NotApplicable, match="threads count 4 is more than the 2 CPUs"):
        threads_t.check(decoder_cpu, threads_t.parse_params({"count": 4}))
    with pytest.raises(UserError, match="threads count must be 0"):
        threads_t.parse_params({"count": -1})
    ctx = TransformContext(llama_fp32, CUDA)
    assert "captures CUDA graphs itself" in graphs.conflict(graphs.parse_params({}), [Step("compile", {"mode": "reduce-overhead"})], ctx)
    assert graphs.conflict(graphs.parse_params({}), [Step("compile", {"mode": "max-autotune-no-cudagraphs"})], ctx) is None
    assert "no fp32 matmul is left" in tf32.conflict(tf32.parse_params({}), [Step("precision", {"dtype": "bf16"})], ctx)


def test_compile_offers_dynamic_shapes_to_forward_models_only(hopper):
    bert = build_workload("bert-base", BuildOptions(size="tiny"))
    choices = TRANSFORMS["compile"].choices(TransformContext(bert, CPU))
    assert {dict(c.params)["dynamic"] for c in choices} == {False, True} and len(choices) == 8
    assert {dict(c.params)["mode"] for c in TRANSFORMS["compile"].choices(TransformContext(bert, CUDA))} == {"default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"}

"""fuse-projections on twelve model families, found by structure (`transforms.structure`).

Eleven transformers architectures built from tiny configs with seeded random weights, and a
BatchNorm convnet (benchmarks/hf_families.py builds them; the benchmark runs them larger). For each:
which projection groups one forward shows, that the stacked model computes the same (fp32), that
the user's model is untouched, and, where nothing stacks, that the transform says why.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import hf_families as families  # noqa: E402 - benchmarks/ is not a package

from agnitra.errors import NotApplicable  # noqa: E402
from agnitra.models.hf_attention import StackedSelfAttention  # noqa: E402
from agnitra.transforms import Recipe, TransformContext, get_transform  # noqa: E402
from agnitra.transforms.patcher import apply_recipe  # noqa: E402
from agnitra.transforms.structure import ProjectionSlice, StackedProjection, find_projection_groups, stack_groups  # noqa: E402
from agnitra.workloads.base import Workload  # noqa: E402

CPU = torch.device("cpu")
LAYERS = families.SIZES["tiny"][1]
STACKING = [name for name, f in families.FAMILIES.items() if f.expect(LAYERS)]
NOTHING = [name for name, f in families.FAMILIES.items() if not f.expect(LAYERS)]


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(name: str) -> Workload:
        if name not in cache:
            cache[name] = families.build(name, "tiny")
        return cache[name]

    return get


def _outputs(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


def _other_inputs(workload: Workload) -> tuple:
    """The example's shapes, other values (token ids kept inside the vocabulary)."""
    g = torch.Generator().manual_seed(7)
    return tuple(torch.randint(3, 256, t.shape, generator=g) if not t.is_floating_point() else torch.randn(t.shape, generator=g) for t in workload.example_inputs)


def _snapshot(model: nn.Module) -> dict:
    return {
        "modules": [(name, m, type(m)) for name, m in model.named_modules()],
        "params": [(name, p, p.detach().clone()) for name, p in model.named_parameters()],
        "buffers": [(name, b.detach().clone()) for name, b in model.named_buffers()],
        "hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()),
        "training": [m.training for m in model.modules()],
    }


def _assert_untouched(model: nn.Module, before: dict) -> None:
    after = _snapshot(model)
    assert [(n, id(m), t) for n, m, t in after["modules"]] == [(n, id(m), t) for n, m, t in before["modules"]]
    assert [(n, id(p)) for n, p, _ in after["params"]] == [(n, id(p)) for n, p, _ in before["params"]]
    assert all(torch.equal(a, b) for (_, _, a), (_, _, b) in zip(after["params"], before["params"]))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(after["buffers"], before["buffers"]))
    assert after["hooks"] == before["hooks"] and after["training"] == before["training"]


def _stacked_members(model: nn.Module) -> int:
    """Projections now computed as part of a stack: structural slices and BERT-family q|k|v."""
    return sum(isinstance(m, ProjectionSlice) for m in model.modules()) + 3 * sum(isinstance(m, StackedSelfAttention) for m in model.modules())


def _fuse(workload: Workload):
    return apply_recipe(Recipe.of("fuse-projections"), TransformContext(workload, CPU))


def test_the_twelve_families_are_all_here():
    assert len(families.FAMILIES) == 12 and set(NOTHING) == {"gpt2", "convnet"}


@pytest.mark.parametrize("name", list(families.FAMILIES))
def test_projection_groups_found_by_structure(name, built):
    workload = built(name)
    detection = find_projection_groups(workload.model, workload.example_inputs)
    assert families.group_shapes(detection.groups) == families.group_shapes_of(families.FAMILIES[name].expect(LAYERS))
    assert not detection.error
    for group in detection.groups:  # siblings of one layer, or (cross-attention) k|v of every decoder layer
        leaves = [n.rsplit(".", 1)[-1] for n in group]
        assert len(set(group)) == len(group)
        assert len(group) <= 3 or set(leaves) <= {"k", "v", "k_proj", "v_proj"}, group


@pytest.mark.parametrize("name", STACKING)
def test_fused_model_computes_the_same_and_the_users_model_is_untouched(name, built):
    workload = built(name)
    before = _snapshot(workload.model)
    reference = _outputs(workload.model, workload.example_inputs)
    patched = _fuse(workload)
    expected_members = sum(size * count for size, count in families.FAMILIES[name].expect(LAYERS))
    assert _stacked_members(patched.model) == expected_members
    assert _stacked_members(workload.model) == 0
    for inputs in (workload.example_inputs, _other_inputs(workload)):
        fused, original = _outputs(patched.model, inputs), _outputs(workload.model, inputs)
        assert fused.shape == original.shape
        assert torch.allclose(fused, original, rtol=1e-5, atol=1e-5), name
    assert torch.equal(_outputs(workload.model, workload.example_inputs), reference)
    _assert_untouched(workload.model, before)
    # nothing is held between forwards
    assert not any(s.holds() for s in patched.model.modules() if isinstance(s, StackedProjection))
    if name != "roberta":  # the BERT-family path says nothing; the structural one says what it stacked
        assert any("by structure" in note and "group" in note for note in patched.notes)


@pytest.mark.parametrize("name", NOTHING)
def test_nothing_to_stack_is_refused_with_the_reason(name, built):
    workload = built(name)
    before = _snapshot(workload.model)
    with pytest.raises(NotApplicable, match="no two of the .* layers that ran read the same input tensor"):
        get_transform("fuse-projections").check(TransformContext(workload, CPU), None)
    _assert_untouched(workload.model, before)


def test_a_wrong_slice_would_be_seen(built):
    """The comparison above is sharp enough: the k rows swapped with the v rows in the stack changes
    the output far beyond the tolerance."""
    workload = built("distilbert")
    patched = _fuse(workload)
    stack = next(m for m in patched.model.modules() if isinstance(m, StackedProjection))
    d = stack.bounds[0][1]
    with torch.no_grad():
        w = stack.linear.weight
        stack.linear.weight = nn.Parameter(torch.cat([w[:d], w[2 * d :], w[d : 2 * d]]), requires_grad=False)
    fused, original = _outputs(patched.model, workload.example_inputs), _outputs(workload.model, workload.example_inputs)
    assert not torch.allclose(fused, original, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["mistral", "bart"])
def test_torch_compile_of_the_fused_model_runs_one_matmul_per_group(name, built):
    """TorchDynamo traces the stacked projection's state as a side effect: the graph has one linear
    per group (not one per member), and compiled outputs match the original."""
    workload = built(name)
    patched = _fuse(workload)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(patched.model, backend=backend)
    for inputs in (workload.example_inputs, _other_inputs(workload)):
        assert torch.allclose(_outputs(compiled, inputs), _outputs(workload.model, inputs), rtol=1e-5, atol=1e-5)
    linears = sum(1 for gm in graphs[:1] for node in gm.graph.nodes if node.target in (torch._C._nn.linear, torch.nn.functional.linear))
    all_linears = sum(isinstance(m, nn.Linear) for m in workload.model.modules())
    groups = find_projection_groups(workload.model, workload.example_inputs).groups
    stacked_away = sum(len(g) - 1 for g in groups)
    assert len(graphs) == 1 and linears == all_linears - stacked_away  # one graph: the state costs no recompile, (linears, all_linears, stacked_away)
    assert not any(s.holds() for s in patched.model.modules() if isinstance(s, StackedProjection))
    torch._dynamo.reset()


# ---- StackedProjection: any call order, changed inputs, nothing kept -----------------------------


class _Three(nn.Module):
    def __init__(self, order=(0, 1, 2), fail: bool = False, skip: int | None = None) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 4), nn.Linear(8, 6, bias=False), nn.Linear(8, 4)
        self.order, self.fail, self.skip = order, fail, skip

    def forward(self, x):
        layers = [self.a, self.b, self.c]
        outs = {i: layers[i](x) for i in self.order if i != self.skip}
        if self.fail:
            raise RuntimeError("boom")
        return torch.cat([outs[i] for i in sorted(outs)], -1)


def _stacked_three(**kw):
    torch.manual_seed(0)
    original = _Three(**kw).eval()
    fused = _Three(**kw).eval()
    fused.load_state_dict(original.state_dict())
    assert stack_groups(fused, [("a", "b", "c")]) == 1
    return original, fused, fused.a.stack


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_members_in_any_order_get_their_columns_with_one_product(order):
    original, fused, stack = _stacked_three(order=order)
    x = torch.randn(3, 8)
    calls = []
    stack.linear.register_forward_hook(lambda m, a, o: calls.append(1))
    with torch.no_grad():
        assert torch.allclose(fused(x), original(x), atol=1e-6)
    assert len(calls) == 1 and not stack.holds()


def test_a_new_or_changed_input_is_never_served_the_old_product():
    original, fused, stack = _stacked_three()
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    with torch.no_grad():
        a = fused.a(x)
        assert torch.allclose(fused.b(y), original.b(y), atol=1e-6)  # another input: its own product
        assert torch.allclose(fused.c(x), original.c(x), atol=1e-6)  # back to x: recomputed, right
        assert torch.allclose(a, original.a(x), atol=1e-6)
        stack.release()
        fused.a(x)
        x.mul_(2)  # changed in place after a's call: b must not get the stale product
        assert torch.allclose(fused.b(x), original.b(x), atol=1e-6)
        stack.release()
        fused.a(x)
        assert torch.allclose(fused.a(x), original.a(x), atol=1e-6)  # the same member twice


@pytest.mark.parametrize("kw", [{"skip": 1}, {"fail": True}])
def test_nothing_is_held_after_a_forward_with_a_member_not_called_or_a_failure(kw):
    original, fused, stack = _stacked_three(**kw)
    x = torch.randn(3, 8)
    with torch.no_grad():
        if kw.get("fail"):
            with pytest.raises(RuntimeError, match="boom"):
                fused(x)
        else:
            assert torch.allclose(fused(x), original(x), atol=1e-6)
    assert not stack.holds()


def test_gpt2_conv1d_layers_reading_one_input_stack_too():
    from transformers.pytorch_utils import Conv1D

    class TwoConv1D(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p, self.q = Conv1D(6, 8), Conv1D(5, 8)
            for m in (self.p, self.q):
                nn.init.normal_(m.weight)
                nn.init.normal_(m.bias)

        def forward(self, x):
            return self.p(x) * 2 + self.q(x).sum(-1, keepdim=True)

    model = TwoConv1D().eval()
    x = torch.randn(2, 3, 8)
    workload = Workload(name="conv1d", model=model, example_inputs=(x,), task="generic")
    assert find_projection_groups(model, (x,)).groups == [("p", "q")]
    patched = _fuse(workload)
    assert isinstance(patched.model.p, ProjectionSlice) and type(model.p) is Conv1D
    assert torch.allclose(_outputs(patched.model, (x,)), _outputs(model, (x,)), rtol=1e-5, atol=1e-5)


def test_detection_runs_on_a_copy_and_leaves_a_training_model_alone(built):
    workload = families.build("convnet", "tiny")
    model = workload.model.train()
    before = _snapshot(model)
    find_projection_groups(model, workload.example_inputs)
    _assert_untouched(model, before)  # running statistics, training flags, no hooks left behind
    assert not nn.modules.module._global_forward_pre_hooks


def test_stacked_projection_is_quantised_once_by_a_later_int8_step(built):
    from agnitra.transforms.quantize import Int8WeightOnlyLinear

    workload = built("mistral")
    patched = apply_recipe(Recipe.of("fuse-projections", "int8-weight-only"), TransformContext(workload, CPU))
    stacks = [m for m in patched.model.modules() if isinstance(m, StackedProjection)]
    assert len(stacks) == 2 * LAYERS and all(isinstance(s.linear, Int8WeightOnlyLinear) for s in stacks)
    separate = apply_recipe(Recipe.of("int8-weight-only"), TransformContext(workload, CPU))
    fused, plain = _outputs(patched.model, workload.example_inputs), _outputs(separate.model, workload.example_inputs)
    assert torch.allclose(fused, plain, rtol=1e-4, atol=1e-4)  # per-row scales: the same rows, quantised the same


# ---- triton-kernels: transformers' RMSNorms and gated MLPs by behaviour --------------------------


@pytest.mark.interpreter
@pytest.mark.parametrize("weights", ["keep", "int8"])
def test_triton_kernels_take_transformers_rms_norms_and_gated_mlps_by_behaviour(weights, built):
    from agnitra.kernels.modules import TritonFeedForward, TritonInt8Linear, TritonRMSNorm

    workload = built("mistral")
    before = _snapshot(workload.model)
    patched = apply_recipe(Recipe.of(("triton-kernels", {"weights": weights, "decode": False})), TransformContext(workload, CPU))
    modules = list(patched.model.modules())
    assert sum(isinstance(m, TritonRMSNorm) for m in modules) == 2 * LAYERS + 1  # two a layer and the final norm
    mlps = [m for m in modules if isinstance(m, TritonFeedForward)]
    assert len(mlps) == LAYERS
    stacks = [m for m in modules if isinstance(m, StackedProjection)]
    if weights == "keep":  # q|k|v stacked by structure; gate|up went to the gating kernel
        assert len(stacks) == LAYERS and all(len(s.bounds) == 3 for s in stacks)
    else:  # quantised first: the kernels' own (class-specific) stacking has nothing to take here
        assert not stacks and all(isinstance(m.w1, TritonInt8Linear) for m in mlps)
    fused, original = _outputs(patched.model, workload.example_inputs), _outputs(workload.model, workload.example_inputs)
    tolerance = 1e-4 if weights == "keep" else 3e-2  # int8 rows: ~1% on random weights
    assert ((fused - original).norm() / original.norm()).item() < tolerance
    _assert_untouched(workload.model, before)


def test_rms_norm_and_gated_mlp_recognition_refuses_look_alikes():
    from transformers.models.mistral.modeling_mistral import MistralMLP, MistralRMSNorm

    from agnitra.transforms.structure import gated_mlp_parts, rms_norm_eps

    class OnePlusRMSNorm(nn.Module):  # Gemma's: normed * (1 + weight)
        def __init__(self, dim):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.zeros(dim)), 1e-6

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)

    class BiasFreeLayerNorm(OnePlusRMSNorm):
        def forward(self, x):
            return torch.nn.functional.layer_norm(x, x.shape[-1:], 1 + self.weight, None, self.eps)

    assert rms_norm_eps(MistralRMSNorm(16, eps=1e-5)) == 1e-5
    assert rms_norm_eps(OnePlusRMSNorm(16)) is None and rms_norm_eps(BiasFreeLayerNorm(16)) is None
    assert rms_norm_eps(nn.LayerNorm(16)) is None

    from transformers import MistralConfig

    mlp = MistralMLP(MistralConfig(hidden_size=16, intermediate_size=32))
    assert gated_mlp_parts(mlp) == (mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    gelu = MistralMLP(MistralConfig(hidden_size=16, intermediate_size=32, hidden_act="gelu"))
    assert gated_mlp_parts(gelu) is None  # the kernel gates with silu only
    plain = nn.Sequential(nn.Linear(16, 32, bias=False), nn.SiLU(), nn.Linear(32, 16, bias=False), nn.Linear(16, 16, bias=False))
    assert gated_mlp_parts(plain) is None


@pytest.mark.interpreter
def test_fuse_projections_then_int8_kernels_stack_what_the_kernels_alone_cannot(built):
    """On a transformers model the kernels stack quantised projections only on the class-specific
    paths: fuse-projections first is how q|k|v and gate|up get one int8 GEMM each, so the search
    keeps that pair (and still drops the float one, which is the same model)."""
    from agnitra.kernels.modules import TritonFeedForward, TritonInt8Linear
    from agnitra.transforms import Step

    workload = built("mistral")
    ctx = TransformContext(workload, CPU)
    kernels = get_transform("triton-kernels")
    fuse = [Step("fuse-projections", {})]
    assert kernels.conflict(kernels.parse_params({"weights": "int8"}), fuse, ctx) is None
    assert "the same model" in kernels.conflict(kernels.parse_params({"weights": "keep"}), fuse, ctx)

    patched = apply_recipe(Recipe.of("fuse-projections", ("triton-kernels", {"weights": "int8", "decode": False})), ctx)
    stacks = [m for m in patched.model.modules() if isinstance(m, StackedProjection)]
    assert len(stacks) == 2 * LAYERS and all(isinstance(s.linear, TritonInt8Linear) for s in stacks)
    assert sum(isinstance(m, TritonFeedForward) for m in patched.model.modules()) == LAYERS  # gating kernel over the stacked gate|up
    fused, original = _outputs(patched.model, workload.example_inputs), _outputs(workload.model, workload.example_inputs)
    assert ((fused - original).norm() / original.norm()).item() < 3e-2


def test_t5_runs_with_dynamic_int8_linears_whose_weight_is_not_a_float_tensor(built):
    workload = built("t5")  # its feed-forward reads wo.weight.dtype before calling wo
    patched = apply_recipe(Recipe.of("dynamic-int8"), TransformContext(workload, CPU))
    out, reference = _outputs(patched.model, workload.example_inputs), _outputs(workload.model, workload.example_inputs)
    assert torch.isfinite(out).all() and out.shape == reference.shape
    assert torch.nn.functional.cosine_similarity(out.flatten(), reference.flatten(), dim=0) > 0.95


# ---- the benchmark's evidence: candidate time by outcome, the answer against torch.compile, the summary ----


def _candidate(outcome_status: str, passed: bool, slot_s: float | None, eval_s: float) -> dict:
    row = {"status": outcome_status, "passed": passed, "slot_s": slot_s, "eval_s": eval_s}
    return dict(row, outcome=families.outcome(row))


def test_candidate_outcomes_and_the_time_that_did_not_pass():
    assert [families.outcome(r) for r in ({"status": "ok", "passed": True}, {"status": "ok", "passed": False}, {"status": "timeout"}, {"status": "skipped"}, {"status": "odd"})] == [
        "passed", "failed verification", "timeout", "skipped", "failed"]
    rows = [_candidate("ok", True, 6.0, 5.0), _candidate("ok", False, 2.0, 1.5), _candidate("timeout", False, 12.0, 10.0), _candidate("ok", True, 0.0, 0.0)]
    t = families.candidate_time(rows)
    assert t["measure"] == "slot_s" and t["total_s"] == 20.0 and t["failing_s"] == 14.0 and t["failing_share"] == 0.7
    assert (t["measured"], t["failing"]) == (4, 2) and t["counts"]["timeout"] == 1 and t["seconds"]["failed verification"] == 2.0
    assert t["eval_s"] == {"total_s": 16.5, "failing_s": 11.5, "failing_share": 11.5 / 16.5}
    rows[0]["slot_s"] = None  # one candidate without its slot: all measured by their own runs
    assert families.candidate_time(rows)["measure"] == "eval_s"
    assert families.candidate_time([])["failing_share"] is None


def test_candidate_slots_run_from_each_start_to_the_next_and_the_last_to_the_final_run():
    events = [(0.0, "measuring the original model"), (1.0, "candidate 1: a"), (1.5, "timing a (round 1/3)"), (4.0, "candidate 2: b"),
              (9.0, "final interleaved run: baseline, peers, finalists"), (12.0, "building the answer")]
    assert families.candidate_slots(events, 2, ended=20.0) == [3.0, 5.0]
    assert families.candidate_slots(events[:4], 2, ended=20.0) == [3.0, 16.0]  # no final run: until the run ended
    assert families.candidate_slots(events, 3, ended=20.0) is None  # the report has a candidate the messages do not show
    assert families.candidate_slots(events[:1], 0, ended=1.0) == []


def _variant(name: str, median: float, passed: bool = True, rounds: int = 8):
    from agnitra.results import Correctness, Latency, VariantResult

    return VariantResult(name, "ok", latency_ms=Latency(median, median, median, median, rounds), correctness=Correctness("rel_error", 1e-4, passed),
                         round_ms=[[median * (1 + 0.001 * (r % 3))] * 3 for r in range(rounds)])


def _report(chosen: str | None, variants: list, peers: list[str], steps: tuple[str, ...] = ("fuse-projections", "compile")):
    from types import SimpleNamespace

    recipe = {"steps": [{"transform": s, "params": {}} for s in steps] if chosen else []}
    return SimpleNamespace(chosen=chosen, recipe=recipe, search={"peers": peers}, bench=SimpleNamespace(variants=[_variant("eager", 2.0)] + variants))


def test_own_recipe_against_the_fastest_compile_peer_that_passed():
    peers = ["compile-max-autotune", "compile-reduce-overhead", "onnxruntime-int8"]
    variants = [_variant("compile-max-autotune", 1.0), _variant("compile-reduce-overhead", 0.8, passed=False), _variant("onnxruntime-int8", 0.3), _variant("fuse + compile", 0.5)]
    won = families.versus_compile(_report("fuse + compile", variants, peers))
    assert won["answer"] == "own" and won["best_compile_peer"] == "compile-max-autotune"  # the faster one failed verification; onnxruntime is no compile mode
    assert won["own_vs_best_compile"] == 2.0 and won["own_beats_best_compile"] and won["own_beats_best_compile_beyond_noise"]
    assert won["own_transforms"] == ["fuse-projections", "compile"] and not won["own_is_compile_options_alone"]
    assert families.versus_compile(_report("fuse + compile", variants, peers, steps=("compile",)))["own_is_compile_options_alone"]
    lost = families.versus_compile(_report("compile-max-autotune", variants, peers))  # a peer is the answer: Agnitra's best recipe beside it, no win
    assert lost["answer"] == "peer" and lost["best_own"] == "fuse + compile" and not lost["own_beats_best_compile"]
    close = families.versus_compile(_report("fuse + compile", [_variant("compile-max-autotune", 1.0), _variant("fuse + compile", 0.9999)], peers))
    assert close["own_beats_best_compile"] and not close["own_beats_best_compile_beyond_noise"]
    none = families.versus_compile(_report(None, [_variant("onnxruntime-int8", 0.3)], peers))
    assert none["answer"] == "baseline" and none["best_compile_peer"] is None and none["own_vs_best_compile"] is None


def test_summary_counts_failed_families_as_no_win_and_sums_candidate_time():
    def row(family, wins, sure, failing_s, total_s, **extra):
        t = {"failing_s": failing_s, "total_s": total_s, "failing_share": failing_s / total_s, "measured": 4, "failing": 1, "measure": "slot_s",
             "seconds": {"passed": total_s - failing_s, "failed verification": failing_s / 2, "timeout": failing_s / 2}}
        return {"family": family, "status": "ok", "answer": "own" if wins else "peer", "evaluated": 4, "own_beats_best_compile": wins,
                "own_beats_best_compile_beyond_noise": sure, "best_compile_peer": "compile-max-autotune", "candidate_time": t, "cost_model_trained_on": 173, **extra}

    rows = [row("gpt2", False, False, 9.0, 10.0), row("bart", True, True, 1.0, 40.0), row("opt", True, False, 2.0, 30.0, own_is_compile_options_alone=True),
            {"family": "t5", "status": "failed", "error": "UserError: the original's output is not finite"}, row("gpt2", True, True, 2.0, 20.0)]
    s = families.summarize(rows)
    assert s["families"] == 4 and s["superseded_rows"] == 1 and s["optimized"] == 3 and s["failed"] == {"t5": "UserError: the original's output is not finite"}
    wins = s["own_beats_best_compile"]
    assert wins["by_median"]["count"] == 3 and wins["by_median"]["share"] == 0.75 and not wins["by_median"]["met"]
    assert wins["beyond_noise"]["families"] == ["gpt2", "bart"] and wins["by_median"]["by_compile_options_alone"] == ["opt"]
    time_ = s["failing_candidate_time"]
    assert (time_["failing_s"], time_["total_s"]) == (5.0, 90.0) and time_["met"] and time_["per_family"]["gpt2"]["failing_share"] == 0.1
    wrong = s["failed_verification_time"]  # the measure: outputs that failed verification, half of the failing time here
    assert (wrong["seconds"], wrong["total_s"]) == (2.5, 90.0) and wrong["met"] and wrong["per_family"]["bart"] == 0.5
    assert s["answers"]["own"] == ["gpt2", "bart", "opt"] and s["measured"] == 12
    assert any("3/4 (75%) by median" in line for line in families.summary_lines(s))


def test_trained_on_reads_the_model_strategys_note():
    notes = ["warm start: 2 recipe(s) ...", "model: cost model trained on 173 measurements of 33 stored run(s) on cuda; retrained after each candidate", "budget: ..."]
    assert families.trained_on(notes) == {"cost_model_trained_on": 173, "cost_model_stored_runs": 33, "strategy_notes": notes[:2]}
    assert families.trained_on(["model: 3 measurement(s) on cuda in the store (fewer than 30)"])["cost_model_trained_on"] is None


def test_each_family_gets_a_fresh_copy_of_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("AGNITRA_DB_URL", "sqlite:///" + str(tmp_path / "store.db"))
    snapshot = families.snapshot_store(tmp_path)
    with families.store_of("opt", snapshot, tmp_path) as copy:
        assert os.environ["AGNITRA_DB_URL"] == f"sqlite:///{copy}" and copy.read_bytes() == snapshot.read_bytes()
        copy.write_bytes(b"what the opt run recorded")
    with families.store_of("bart", snapshot, tmp_path) as copy:
        assert copy.read_bytes() == snapshot.read_bytes()
    assert families.store_census("cpu")["rows"] == 0
    assert os.environ["AGNITRA_DB_URL"] == "sqlite:///" + str(tmp_path / "store.db")
    assert families._names("all") == list(families.FAMILIES)
    with pytest.raises(SystemExit, match="unknown family llama"):
        families._names("opt,llama")


def test_the_behaviour_probe_is_drawn_on_the_cpu_whatever_the_default_device():
    """A user's torch.set_default_device("cuda") made the seeded CPU generator meet a CUDA default
    (seen on the GPU: triton-kernels failed to patch a transformers Mistral); the meta device shows
    the same on the CPU."""
    from agnitra.transforms.structure import _probe

    like = torch.zeros(1, dtype=torch.float16)
    with torch.device("meta"):
        probe = _probe(8, like)
    assert probe.device == like.device and probe.dtype == torch.float16 and torch.isfinite(probe).all()
    assert torch.equal(probe, _probe(8, like))  # seeded

"""The weight quantisers on transformers' Conv1D (GPT-2's projections: weight [in, out], y = x @ W + b).

A GPT-2 from a tiny GPT2Config (n_embd 32, 2 layers, 4 heads, n_inner 128; seeded random weights)
has 8 Conv1D layers: c_attn 32 -> 96, attn.c_proj 32 -> 32, c_fc 32 -> 128, mlp.c_proj 128 -> 32.
Each quantiser must replace all of them by a module computing the same function (the weight
transposed once), leave the user's model as it was, and offer itself in the search space; a plain
nn.Linear model must be quantised exactly as before.

Bounds, relative L2 error of the last hidden state against fp32 on held-out ids (those of
test_transforms_quantize, whose reasoning holds here): int8 weight-only 2e-2 (measured 2.9e-3),
dynamic int8 2e-2 (8.4e-3), int4 with groups of 32 1e-1 (3.7e-2), mixed int4 g32 / int8 1e-1
(3.0e-2), fp8 on a bf16 copy 1e-1 (1.6e-2); and the embeddings' verification (mean cosine >=
0.99). The weight left untransposed (shapes kept) gives ~0.5.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agnitra.errors import NotApplicable
from agnitra.search.space import recipe_space
from agnitra.transforms import Recipe, TransformContext
from agnitra.transforms import mixed_precision as mp
from agnitra.transforms import quantize as q
from agnitra.transforms.base import get_transform
from agnitra.transforms.patcher import apply_recipe
from agnitra.verify.compare import MIN_COSINE, compare
from agnitra.workloads.base import Workload

transformers = pytest.importorskip("transformers")
from transformers.pytorch_utils import Conv1D  # noqa: E402

CPU = torch.device("cpu")
LAYERS = 2
CONV1D_LAYERS = 4 * LAYERS  # c_attn, attn.c_proj, c_fc, mlp.c_proj per block
QUANTISERS = ("int8-weight-only", "int4-weight-only", "dynamic-int8", "mixed-precision")

# (transform, params, the quantised module class, bound on the relative error)
CASES = [
    ("int8-weight-only", {}, q.Int8WeightOnlyLinear, 2e-2),
    ("int4-weight-only", {"group_size": 32}, q.Int4WeightOnlyLinear, 1e-1),
    ("dynamic-int8", {}, q.DynamicInt8Linear, 2e-2),
]


class LastHidden(nn.Module):
    """GPT2Model called with token ids, its last hidden state out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).last_hidden_state  # [B, S, 32]


def _gpt2() -> Workload:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_embd=32, n_layer=LAYERS, n_head=4, n_inner=128, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    model = LastHidden(transformers.GPT2Model(config)).eval()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    return Workload(name="gpt2-tiny", model=model, example_inputs=(ids,), task="encoder")


@pytest.fixture(scope="module")
def gpt2() -> Workload:
    return _gpt2()


def _run(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


def _held_out(workload: Workload) -> tuple:
    return (torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(7)),)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _snapshot(model: nn.Module) -> dict:
    return {
        "modules": [(name, m, type(m)) for name, m in model.named_modules()],
        "params": [(name, p, p.detach().clone()) for name, p in model.named_parameters()],
    }


def _assert_untouched(model: nn.Module, before: dict) -> None:
    assert [(name, m, type(m)) for name, m in model.named_modules()] == before["modules"]
    after = list(model.named_parameters())
    assert [(name, p) for name, p in after] == [(name, p) for name, p, _ in before["params"]]
    for (name, p), (_, _, values) in zip(after, before["params"]):
        assert torch.equal(p, values), name


def _conv1d_names(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, Conv1D)]


def _apply(workload: Workload, name: str, params: dict | None = None):
    return apply_recipe(Recipe.of((name, dict(params or {}))), TransformContext(workload, CPU))


def _assert_close(workload: Workload, model: nn.Module, bound: float, label: str) -> None:
    held_out = _held_out(workload)  # other values and another batch size than the example
    reference, out = _run(workload.model, held_out), _run(model, held_out)
    error = _rel(out, reference)
    assert 0 < error < bound, f"{label}: relative error {error:.2e}"
    cosine = compare("cosine", reference, out)
    assert cosine.passed and cosine.value >= MIN_COSINE, f"{label}: {cosine.details}"


# ---- each quantiser on GPT-2 -----------------------------------------------------------------------


@pytest.mark.parametrize("name, params, cls, bound", CASES, ids=[c[0] for c in CASES])
def test_gpt2_conv1d_projections_are_quantised_close_and_the_users_model_untouched(gpt2, name, params, cls, bound):
    convs = {n: gpt2.model.get_submodule(n) for n in _conv1d_names(gpt2.model)}
    assert len(convs) == CONV1D_LAYERS
    before = _snapshot(gpt2.model)
    reference = _run(gpt2.model, gpt2.example_inputs)

    patched = _apply(gpt2, name, params)

    _assert_untouched(gpt2.model, before)
    assert torch.equal(_run(gpt2.model, gpt2.example_inputs), reference)  # the user's model computes what it did
    assert not _conv1d_names(patched.model)
    for n, conv in convs.items():  # each at its place, with the Conv1D's shape in the Linear convention
        module = patched.model.get_submodule(n)
        assert isinstance(module, cls), n
        assert (module.in_features, module.out_features) == tuple(conv.weight.shape), n
    assert sum(isinstance(m, cls) for m in patched.model.modules()) == CONV1D_LAYERS
    _assert_close(gpt2, patched.model, bound, name)


def test_gpt2_mixed_precision_plans_over_the_conv1d_layers(gpt2):
    params = {"low": "int4", "group_size": 32, "high": "int8", "keep_fraction": 0.25}
    ctx = TransformContext(gpt2, CPU)
    before = _snapshot(gpt2.model)

    patched = apply_recipe(Recipe.of(("mixed-precision", params)), ctx)

    _assert_untouched(gpt2.model, before)
    chosen = mp.plan_of(ctx, get_transform("mixed-precision").parse_params(params))
    assert sorted(chosen.formats) == sorted(_conv1d_names(gpt2.model))
    assert len(chosen.high) == 2 and chosen.low_count == CONV1D_LAYERS - 2
    modules = list(patched.model.modules())
    assert not _conv1d_names(patched.model)
    assert sum(isinstance(m, q.Int8WeightOnlyLinear) for m in modules) == 2
    assert sum(isinstance(m, q.Int4WeightOnlyLinear) for m in modules) == CONV1D_LAYERS - 2
    for name, _ in chosen.high:  # the most sensitive layers at int8, where the plan put them
        assert isinstance(patched.model.get_submodule(name), q.Int8WeightOnlyLinear), name
    _assert_close(gpt2, patched.model, 1e-1, "mixed-precision")


def test_gpt2_fp8_through_the_private_cpu_flag(gpt2, monkeypatch):
    """fp8 (CUDA 8.9+ otherwise) shares the conversion: its math on the CPU, on a bf16 copy."""
    monkeypatch.setattr(q, "_FP8_ALLOW_CPU", True)
    model = _gpt2().model.to(torch.bfloat16)
    workload = Workload(name="gpt2-bf16", model=model, example_inputs=gpt2.example_inputs, task="encoder")
    patched = _apply(workload, "fp8")
    assert not _conv1d_names(patched.model)
    assert sum(isinstance(m, q.Fp8Linear) for m in patched.model.modules()) == CONV1D_LAYERS
    assert _rel(_run(patched.model, gpt2.example_inputs), _run(gpt2.model, gpt2.example_inputs)) < 0.1


def test_skip_and_min_features_apply_to_conv1d_layers(gpt2):
    patched = _apply(gpt2, "int8-weight-only", {"skip": "mlp"})
    assert sorted(_conv1d_names(patched.model)) == [f"model.h.{i}.mlp.{p}" for i in range(LAYERS) for p in ("c_fc", "c_proj")]
    assert sum(isinstance(m, q.Int8WeightOnlyLinear) for m in patched.model.modules()) == 2 * LAYERS
    with pytest.raises(NotApplicable, match=r"no nn.Linear or Conv1D layer to convert \(8 smaller than 64 features\)"):
        _apply(gpt2, "int8-weight-only", {"min_features": 64})  # every one has a side of 32


# ---- the Conv1D seen as a Linear ---------------------------------------------------------------


@pytest.mark.parametrize("nx, nf", [(32, 32), (32, 96)])  # square: a missing transpose would not fail on shapes
def test_a_quantised_conv1d_computes_the_conv1d_function(nx, nf):
    torch.manual_seed(0)
    conv = Conv1D(nf, nx)
    nn.init.normal_(conv.bias)
    weight = conv.weight.detach().clone()
    x = torch.randn(2, 5, nx)

    linear = q.as_linear(conv)
    assert type(linear) is nn.Linear and (linear.in_features, linear.out_features) == (nx, nf)
    assert torch.allclose(linear(x), conv(x), rtol=1e-5, atol=1e-5)
    assert linear.weight.data_ptr() != conv.weight.data_ptr() and torch.equal(conv.weight, weight)  # a transposed copy

    int8 = q.Int8WeightOnlyLinear.from_linear(linear)
    assert torch.allclose(int8.dequantized_weight().t(), weight, atol=int8.scales.max().item() / 2 + 1e-7)
    assert _rel(int8(x).detach(), conv(x).detach()) < 2e-2


def test_only_transformers_conv1d_counts_not_a_look_alike_by_name():
    class Conv1D(nn.Module):  # noqa: N801 - a user's class of the same name, not transformers'
        def __init__(self) -> None:
            super().__init__()
            self.nf, self.weight, self.bias = 8, nn.Parameter(torch.randn(16, 8)), nn.Parameter(torch.zeros(8))

        def forward(self, x):
            return x[..., :8] * self.bias

    look_alike = Conv1D()
    assert not q.is_quantisable(look_alike) and q.as_linear(look_alike) is look_alike
    assert q.is_quantisable(transformers.pytorch_utils.Conv1D(8, 16))


# ---- nn.Linear as before -----------------------------------------------------------------------


@pytest.mark.parametrize("name, params, cls, bound", CASES, ids=[c[0] for c in CASES])
def test_a_plain_linear_model_is_quantised_exactly_as_before(name, params, cls, bound):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).eval()
    x = torch.randn(4, 64)
    workload = Workload(name="mlp", model=model, example_inputs=(x,), task="generic")

    patched = _apply(workload, name, params)

    direct = nn.Sequential(cls.from_linear(model[0], **params), model[1], cls.from_linear(model[2], **params))  # built from the Linears themselves
    for i in (0, 2):
        assert q.as_linear(model[i]) is model[i]
        assert isinstance(patched.model[i], cls) and type(model[i]) is nn.Linear
        if cls is not q.DynamicInt8Linear:  # its weight is in torch's packed parameters
            for (key, built), (_, expected) in zip(patched.model[i].state_dict().items(), direct[i].state_dict().items()):
                assert torch.equal(built, expected), key
    assert torch.equal(_run(patched.model, (x,)), _run(direct, (x,)))


# ---- offered by the search space, and why not where nothing fits ------------------------------


def test_the_space_offers_the_quantisers_on_gpt2_and_says_why_not_on_a_model_without_projections(gpt2):
    candidates, skipped = recipe_space(TransformContext(gpt2, CPU), allowed=set(QUANTISERS))
    offered = {step.transform for c in candidates for step in c.recipe.steps}
    assert offered == set(QUANTISERS), [(s.transform, s.reason) for s in skipped]
    assert not [s for s in skipped if "Conv1D layer to convert" in s.reason]

    convnet = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3)).eval()
    workload = Workload(name="convnet", model=convnet, example_inputs=(torch.randn(1, 3, 16, 16),), task="generic")
    candidates, skipped = recipe_space(TransformContext(workload, CPU), allowed=set(QUANTISERS))
    assert not candidates
    said = {name for name in QUANTISERS for s in skipped if s.transform.startswith(name) and "no nn.Linear or Conv1D layer to convert" in s.reason}
    assert said == set(QUANTISERS), [(s.transform, s.reason) for s in skipped]

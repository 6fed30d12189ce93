"""The user's model is untouched by every verb, and every verb works on the models users have.

Each test takes a user model (plain; weight-normalised and spectral-normalised through
torch.nn.utils.parametrizations; the old hook-based weight_norm; forward hooks and pre-hooks; tied
weights; in train mode with BatchNorm and some parameters frozen), records a bitwise snapshot
(every state_dict tensor's bytes, dtype and device; each parameter's identity, data pointer and
requires_grad; each submodule's identity, class and training flag; the hook dicts) and asserts it
is the same after the verb. Train mode matters: BatchNorm's running statistics and spectral
norm's power iteration write their buffers in place on every forward in training mode.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations

import agnitra
from compile_default import COMPILE_DEFAULT
from agnitra.transforms.base import TransformContext
from agnitra.transforms.patcher import apply_recipe, structural_copy, unwrap
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.prepare import prepare_workload


def _old_weight_norm(module: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of parametrizations.weight_norm
        return torch.nn.utils.weight_norm(module)


class Everything(nn.Module):
    """Parametrizations, the old weight norm, tied weights, a frozen layer, BatchNorm and hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = parametrizations.weight_norm(nn.Conv1d(4, 8, 3, padding=1))
        self.norm = nn.BatchNorm1d(8)
        self.proj = parametrizations.spectral_norm(nn.Linear(8, 8))
        self.old = _old_weight_norm(nn.Linear(8, 8))
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)
        self.embed = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 8, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.proj.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
        self.old.register_forward_hook(lambda module, args, out: out + 1)

    def forward(self, x):  # x [B, 4, T]
        h = self.norm(self.conv(x)).mean(-1)  # [B, 8]
        return self.head(self.embed(self.old(self.proj(self.frozen(h)))))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8, bias=False)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.head = nn.Linear(8, 8, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x):
        return self.head(self.body(self.embed(x)))


def _with_hooks() -> nn.Module:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    model[0].register_forward_pre_hook(lambda module, args: (args[0] - 0.5,))
    model[2].register_forward_hook(lambda module, args, out: out * 3)
    return model


def _frozen_in_train_mode() -> nn.Module:
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8))
    model[0].requires_grad_(False)
    return model.train()


MODELS = {
    "plain": lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)),
    "weight_norm": lambda: nn.Sequential(parametrizations.weight_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 8)),
    "spectral_norm": lambda: nn.Sequential(parametrizations.spectral_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 8)).train(),
    "old_weight_norm": lambda: nn.Sequential(_old_weight_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 8)),
    "hooks": _with_hooks,
    "tied": Tied,
    "train_frozen": _frozen_in_train_mode,
    "everything": lambda: Everything().train(),
}


def _user_model(kind: str) -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    model = MODELS[kind]()
    inputs = (torch.randn(3, 4, 6),) if kind == "everything" else (torch.randn(3, 8),)
    return model, inputs


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).contiguous().view(torch.uint8).clone()


def snapshot(model: nn.Module) -> dict:
    """Everything a verb could change on the user's model, bitwise."""
    return {
        "state": {k: (_bytes(v), v.dtype, v.device) for k, v in model.state_dict(keep_vars=True).items()},
        "params": [(n, id(p), p.data_ptr(), p.requires_grad, p.dtype, p.device, type(p)) for n, p in model.named_parameters(remove_duplicate=False)],
        "buffers": [(n, id(b), b.data_ptr(), b.dtype, b.device) for n, b in model.named_buffers(remove_duplicate=False)],
        "modules": [(n, id(m), type(m), m.training) for n, m in model.named_modules(remove_duplicate=False)],
        "hooks": [(n, list(m._forward_hooks.items()), list(m._forward_pre_hooks.items())) for n, m in model.named_modules(remove_duplicate=False)],
    }


def assert_same(before: dict, after: dict) -> None:
    assert before["state"].keys() == after["state"].keys()
    for key, (data, dtype, device) in before["state"].items():
        now = after["state"][key]
        assert (dtype, device) == (now[1], now[2]), key
        assert torch.equal(data, now[0]), f"{key} changed"
    for part in ("params", "buffers", "modules", "hooks"):
        assert before[part] == after[part], part


FAST_VERBS = {
    "profile": lambda model, inputs: agnitra.profile(model, inputs, device="cpu", runs=2, warmup=1),
    "inspect": lambda model, inputs: agnitra.inspect(model, inputs, device="cpu", runs=2, warmup=1),
    "benchmark": lambda model, inputs: agnitra.benchmark(model, inputs, device="cpu", variants=["eager"], runs=2, warmup=1, op_breakdown=False),
    "bf16": lambda model, inputs: agnitra.benchmark(model, inputs, device="cpu", dtype="bf16", variants=["eager"], runs=2, warmup=1, op_breakdown=False, check=False),
}


@pytest.mark.parametrize("verb", sorted(FAST_VERBS))
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_verbs_leave_the_user_model_bitwise_unchanged(kind, verb):
    model, inputs = _user_model(kind)
    before = snapshot(model)
    FAST_VERBS[verb](model, inputs)
    assert_same(before, snapshot(model))


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_the_prepared_copy_computes_what_the_user_model_computes(kind):
    """Hooks, parametrizations and tied weights work in the copy: same outputs as the original in eval mode."""
    model, inputs = _user_model(kind)
    reference, _ = _user_model(kind)
    workload, _ = prepare_workload(model, inputs, device="cpu")
    with torch.no_grad():
        expected = reference.eval()(*inputs)
        torch.testing.assert_close(workload.model(*inputs), expected)
    assert model.training == MODELS[kind]().training  # the user's flag, not the copy's eval


def test_sdk_dtype_casts_the_copy_not_the_user_parameters():
    model, inputs = _user_model("everything")
    before = snapshot(model)
    workload, _ = prepare_workload(model, inputs, device="cpu", dtype="bf16")
    assert all(p.dtype == torch.bfloat16 for p in workload.model.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert workload.model.head.weight is workload.model.embed.weight  # still tied in the copy
    assert_same(before, snapshot(model))


def test_a_workload_handed_over_is_copied_too():
    model, inputs = _user_model("train_frozen")
    before = snapshot(model)
    workload, _ = prepare_workload(agnitra.Workload(name="mine", model=model, example_inputs=inputs, task="generic"), device="cpu", dtype="bf16")
    assert workload.model is not model and next(workload.model.parameters()).dtype == torch.bfloat16
    assert_same(before, snapshot(model))


# --- the patcher's copy ----------------------------------------------------------------------


def test_structural_copy_has_its_own_parameters_over_the_same_storage():
    model, _ = _user_model("tied")
    before = snapshot(model)
    copy = structural_copy(model)
    assert copy.embed.weight is not model.embed.weight
    assert copy.embed.weight.data_ptr() == model.embed.weight.data_ptr()  # not duplicated
    assert copy.head.weight is copy.embed.weight  # tied in the copy
    copy.body[0].weight.data = torch.zeros(8, 8)
    copy.to(torch.bfloat16)
    copy.eval()
    assert_same(before, snapshot(model))


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_recipe_applies_to_every_kind_of_model_and_leaves_it_alone(kind):
    model, inputs = _user_model(kind)
    before = snapshot(model)
    workload, device = prepare_workload(model, inputs, device="cpu")
    patched = apply_recipe(Recipe.of(("precision", {"dtype": "bf16"})), TransformContext(workload, device))
    with torch.no_grad():
        out = patched.model(*inputs)
        torch.testing.assert_close(out.float(), workload.model(*inputs), rtol=0.1, atol=0.1)
    assert_same(before, snapshot(model))


def test_a_transformers_wav2vec2_with_weight_norm_gets_its_recipe():
    """Every candidate used to fail at setup: copy.copy refuses parametrized modules."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
        conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
    )
    torch.manual_seed(0)
    model = transformers.Wav2Vec2Model(config).eval()
    inputs = (torch.randn(1, 400),)
    before = snapshot(model)
    workload, device = prepare_workload(model, inputs, device="cpu")
    patched = apply_recipe(Recipe.of(("precision", {"dtype": "bf16"})), TransformContext(workload, device))
    assert all(p.dtype == torch.bfloat16 for p in unwrap(patched.model).parameters())
    with torch.no_grad():
        torch.testing.assert_close(patched.model(*inputs).last_hidden_state, model(*inputs).last_hidden_state, rtol=0.1, atol=0.1)
    assert_same(before, snapshot(model))


# --- the slow verbs: compile, optimize, load --------------------------------------------------


@pytest.mark.slow
def test_compile_optimize_and_load_leave_the_user_model_bitwise_unchanged(tmp_path):
    model, inputs = _user_model("everything")
    before = snapshot(model)
    agnitra.benchmark(model, inputs, device="cpu", variants=["eager", "compile"], runs=2, warmup=1, op_breakdown=False)
    assert_same(before, snapshot(model))
    optimized = agnitra.optimize(model, inputs, device="cpu", budget="60s", transforms=["precision", COMPILE_DEFAULT], peers=[], out=tmp_path / "run")
    assert_same(before, snapshot(model))
    with torch.no_grad():
        optimized(*inputs)
    loaded = agnitra.load(tmp_path / "run", model, inputs, device="cpu")
    with torch.no_grad():
        loaded(*inputs)
    assert_same(before, snapshot(model))

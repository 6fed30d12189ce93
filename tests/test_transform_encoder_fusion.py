"""BERT-family encoders: stacked q|k|v self-attention (`fuse-projections`, `triton-kernels fuse=true`)
and the Intermediate's gelu(dense(x)) as one Triton matmul launch (`triton-kernels mlp=true`).

Triton kernels run through the interpreter on the CPU (conftest sets TRITON_INTERPRET=1), in fp32:
the interpreter's tl.dot is wrong for bf16 operands.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertIntermediate, BertSelfAttention

from agnitra.kernels import modules as km
from agnitra.errors import NotApplicable
from agnitra.models.hf_attention import StackedSelfAttention, encoder_self_attention, unstackable_reason
from agnitra.transforms import Recipe, TransformContext, get_transform
from agnitra.transforms.patcher import apply_recipe, unwrap
from agnitra.workloads.base import Workload
from agnitra.workloads.registry import BuildOptions, build_workload
from agnitra.workloads.zoo._hf import set_attention
from kernel_device import DEVICE

CPU = torch.device("cpu")


def _tiny_bert() -> Workload:
    return build_workload("bert-base", BuildOptions(size="tiny"))


def _apply(workload: Workload, *steps):
    return apply_recipe(Recipe.from_dict(Recipe.of(*steps).to_dict()), TransformContext(workload, CPU))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def _padded_inputs(workload: Workload) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch 2 of the example's length; the second row padded over its last 5 positions."""
    ids, _ = workload.example_inputs
    seq = ids.shape[1]
    ids = torch.cat([ids, ids.flip(-1)])  # [2, S]
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[1, seq - 5 :] = 0
    return ids, mask


def _outputs(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


def _self_attentions(bert_encoder: nn.Module) -> list[nn.Module]:
    return [layer.attention.self for layer in unwrap(bert_encoder).bert.encoder.layer]


def _small_config(**overrides) -> BertConfig:
    return BertConfig(hidden_size=32, num_attention_heads=4, intermediate_size=48, num_hidden_layers=1, **overrides)


# ---- fuse-projections on BERT --------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_fuse_projections_stacks_bert_self_attention_in_the_copy_only(attention):
    workload = _tiny_bert()
    if attention == "eager":
        set_attention(workload.model.bert, "eager")
    user = _self_attentions(workload.model)
    patched = _apply(workload, "fuse-projections")
    fused = _self_attentions(patched.model)

    assert len(fused) == workload.model.bert.config.num_hidden_layers
    assert all(type(m) is StackedSelfAttention for m in fused)
    assert sum(type(m) is StackedSelfAttention for m in unwrap(patched.model).modules()) == len(fused)
    for stacked, original in zip(fused, user):
        assert torch.equal(stacked.qkv.weight, torch.cat([original.query.weight, original.key.weight, original.value.weight]))
        assert torch.equal(stacked.qkv.bias, torch.cat([original.query.bias, original.key.bias, original.value.bias]))
    assert all(type(m) is BertSelfAttention for m in _self_attentions(workload.model))  # the user's model is untouched
    assert unwrap(patched.model).bert.config._attn_implementation == attention

    for inputs in (workload.example_inputs, _padded_inputs(workload)):
        assert _rel(_outputs(patched.model, inputs), _outputs(workload.model, inputs)) < 1e-5


def test_padding_mask_reaches_the_stacked_attention():
    """The padded row's outputs depend on the mask: a mask dropped on the way would show here."""
    workload = _tiny_bert()
    patched = _apply(workload, "fuse-projections")
    ids, mask = _padded_inputs(workload)
    masked, unmasked = _outputs(patched.model, (ids, mask)), _outputs(patched.model, (ids, torch.ones_like(mask)))
    assert torch.allclose(masked[0], unmasked[0], rtol=1e-5, atol=1e-6)  # the full row is the same
    assert _rel(masked[1], unmasked[1]) > 1e-3
    assert _rel(masked, _outputs(workload.model, (ids, mask))) < 1e-5


def test_encoder_self_attention_only_for_transformers_encoders():
    assert encoder_self_attention(BertSelfAttention(_small_config()))
    assert not encoder_self_attention(BertSelfAttention(_small_config(is_decoder=True)))

    class LookAlikeSelfAttention(nn.Module):  # every attribute and the forward, but not transformers'
        def __init__(self, attention: nn.Module) -> None:
            super().__init__()
            self.query, self.key, self.value, self.dropout = attention.query, attention.key, attention.value, attention.dropout
            self.config, self.scaling, self.is_causal = attention.config, attention.scaling, attention.is_causal
            self.attention_head_size, self.all_head_size = attention.attention_head_size, attention.all_head_size

        def forward(self, hidden_states, attention_mask=None, past_key_values=None, **kwargs):
            return hidden_states, None

    assert not encoder_self_attention(LookAlikeSelfAttention(BertSelfAttention(_small_config())))
    assert not encoder_self_attention(nn.Linear(4, 4))


# The self-attention forwards of the releases pyproject admits (transformers >= 4.51), by signature:
# 4.x computes attention itself; 5.x hands q, k, v to the attention interface under a cache
# argument renamed from release to release (past_key_values in 5.0, cache from 5.2x).
def _forward_4_51(self, hidden_states, attention_mask=None, head_mask=None, encoder_hidden_states=None, encoder_attention_mask=None, past_key_value=None, output_attentions=False): ...
def _forward_4_57(self, hidden_states, attention_mask=None, head_mask=None, encoder_hidden_states=None, past_key_values=None, output_attentions=False, cache_position=None): ...
def _forward_5_0(self, hidden_states, attention_mask=None, past_key_values=None, cache_position=None, **kwargs): ...
def _forward_5_24(self, hidden_states, attention_mask=None, cache=None, **kwargs): ...


def _with_forward(forward) -> nn.Module:
    """The installed BertSelfAttention, its forward swapped for another release's (same module)."""
    cls = type("BertSelfAttention", (BertSelfAttention,), {"forward": forward, "__module__": BertSelfAttention.__module__})
    return cls(_small_config())


@pytest.mark.parametrize("forward", [_forward_5_0, _forward_5_24])
def test_bert_self_attention_of_transformers_5_releases_is_recognised_by_structure(forward):
    assert encoder_self_attention(_with_forward(forward))


@pytest.mark.parametrize("forward", [_forward_4_51, _forward_4_57])
def test_bert_self_attention_of_transformers_4_is_refused_with_the_reason(forward):
    module = _with_forward(forward)
    assert not encoder_self_attention(module)
    assert "head_mask" in unstackable_reason(module) and "transformers >= 5" in unstackable_reason(module)

    workload = Workload(name="bert-4", model=nn.Sequential(module), example_inputs=(torch.zeros(1, 2, 32),), task="encoder")
    with pytest.raises(NotApplicable, match=r"computes attention itself; stacking q\|k\|v needs transformers >= 5"):
        get_transform("fuse-projections").check(TransformContext(workload, CPU), None)


def test_stacked_self_attention_computes_the_original_and_refuses_a_cache():
    torch.manual_seed(0)
    original = BertSelfAttention(_small_config()).eval()
    qkv = nn.Linear(32, 96)
    with torch.no_grad():
        qkv.weight.copy_(torch.cat([original.query.weight, original.key.weight, original.value.weight]))
        qkv.bias.copy_(torch.cat([original.query.bias, original.key.bias, original.value.bias]))
    stacked = StackedSelfAttention(original, qkv)
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        assert _rel(stacked(x)[0], original(x)[0]) < 1e-5
    with pytest.raises(RuntimeError, match="KV cache"):
        stacked(x, past_key_values=object())


# ---- linear_then_gelu and TritonLinearGELU -------------------------------------------------------


def test_linear_then_gelu_only_for_exact_gelu():
    exact = BertIntermediate(_small_config(hidden_act="gelu"))
    assert km.linear_then_gelu(exact) is exact.dense
    for act in ("gelu_new", "gelu_pytorch_tanh", "relu"):
        assert km.linear_then_gelu(BertIntermediate(_small_config(hidden_act=act))) is None, act
    assert km.linear_then_gelu(nn.Sequential(nn.Linear(4, 4), nn.GELU())) is None


@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
def test_triton_linear_gelu_matches_float64_reference():
    """x [2, 5, 24] -> 40 outputs (M, N, K not multiples of the blocks), bias on; pre-activations
    ~N(0, 1), where exact and tanh GELU differ by ~2e-4: the tolerance tells them apart."""
    g = torch.Generator().manual_seed(0)
    linear = nn.Linear(24, 40).to(DEVICE)
    with torch.no_grad():
        linear.weight.copy_((torch.randn(40, 24, generator=g) * 24**-0.5).to(DEVICE))
        linear.bias.copy_((torch.randn(40, generator=g) * 0.5).to(DEVICE))
    x = torch.randn(2, 5, 24, generator=g).to(DEVICE)
    with torch.no_grad():
        y = km.TritonLinearGELU(linear)(x)
    pre = F.linear(x.double(), linear.weight.double(), linear.bias.double())
    assert y.shape == (2, 5, 40) and y.dtype == torch.float32
    assert _rel(y, F.gelu(pre)) < 1e-5  # fp32, IEEE products: ~1e-7
    assert _rel(F.gelu(pre, approximate="tanh"), F.gelu(pre)) > 1e-5  # the check would see the tanh form


# ---- triton-kernels on BERT ----------------------------------------------------------------------


def test_triton_kernels_fuse_bert_attention_and_intermediate():
    workload = _tiny_bert()
    patched = _apply(workload, ("triton-kernels", {"weights": "keep", "norms": False, "decode": False}))
    model = unwrap(patched.model)
    layers = model.bert.encoder.layer
    assert all(isinstance(layer.intermediate, km.TritonLinearGELU) for layer in layers)
    assert sum(isinstance(m, km.TritonLinearGELU) for m in model.modules()) == len(layers)
    assert all(type(layer.attention.self) is StackedSelfAttention for layer in layers)
    assert type(workload.model.bert.encoder.layer[0].intermediate) is BertIntermediate  # copy only
    for inputs in (workload.example_inputs, _padded_inputs(workload)):
        assert _rel(_outputs(patched.model, inputs), _outputs(workload.model, inputs)) < 1e-5  # fp32: ~5e-8


def test_search_space_for_a_gpu_encoder_has_the_kernels_without_norms_and_no_duplicate_stacking():
    from agnitra.search.space import recipe_space

    workload = build_workload("bert-base", BuildOptions(size="tiny"))
    ranked, _ = recipe_space(TransformContext(workload, torch.device("cuda")), allowed={"fuse-projections", "triton-kernels", "compile"})
    names = [c.recipe.name for c in ranked]
    assert names[0].startswith("triton-kernels(") and "norms=False" in names[0] and "weights=keep" in names[0]
    assert "fuse-projections + compile(coordinate_descent=True,dynamic=False,freezing=False,mode=reduce-overhead,pdl=True)" in names
    assert not [n for n in names if "fuse-projections" in n and "triton-kernels" in n and "fuse=True" in n]

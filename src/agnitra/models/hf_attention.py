"""transformers' encoder self-attention (BERT family) over one stacked q|k|v Linear.

`BertSelfAttention` and its copies (RoBERTa, ...) in transformers 5 project the hidden states
three times, one small GEMM each, then hand q, k, v to the attention function the model chose
(`config._attn_implementation`). `StackedSelfAttention` does the same computation with one GEMM
over the stacked rows and the same attention function, so masks, scaling and outputs are
transformers' own. It takes only what an encoder uses: a layer given a KV cache raises.

Recognition is structural, not by class name, because the names move between releases (the cache
argument is `past_key_value` in 4.x, `past_key_values` in 5.0, `cache` from 5.2x): q/k/v
submodules, the attributes the attention functions read, a forward of the shape
`(hidden_states, attention_mask, [cache arguments], **kwargs)`, and a defining module that holds
transformers' attention interface. transformers 4.x self-attention computes attention inside its
own forward (head_mask, output_attentions, relative positions): `unstackable_reason` says so.
"""

from __future__ import annotations

import inspect
import sys

import torch
from torch import nn

_PROJECTIONS = ("query", "key", "value")
# what the attention functions and this replacement read from the module
_ATTRIBUTES = ("config", "attention_head_size", "all_head_size", "scaling", "is_causal", "dropout")
# the KV-cache arguments of the forwards this replacement mirrors, under each release's names
_CACHE_PARAMETERS = frozenset({"past_key_value", "past_key_values", "cache", "cache_position"})
_LEADING_PARAMETERS = ["hidden_states", "attention_mask"]
_NEEDS = "stacking q|k|v needs transformers >= 5, whose self-attention hands q, k, v to the attention interface"


def has_qkv_projections(module: nn.Module) -> bool:
    """Separate query, key and value submodules: the shape of a BERT-family self-attention."""
    return all(isinstance(getattr(module, name, None), nn.Module) for name in _PROJECTIONS)


def encoder_self_attention(module: nn.Module) -> bool:
    """A transformers encoder self-attention whose q/k/v this module can stack."""
    return has_qkv_projections(module) and unstackable_reason(module) is None


def unstackable_reason(module: nn.Module) -> str | None:
    """Why `StackedSelfAttention` cannot replace `module` (one with q/k/v submodules), else None."""
    problem = _forward_problem(type(module)) or _attribute_problem(module) or _interface_problem(type(module))
    return None if problem is None else f"{_describe(type(module))}: {problem}; {_NEEDS}"


def _forward_problem(cls: type) -> str | None:
    parameters = list(inspect.signature(cls.forward).parameters.values())[1:]  # past self
    named = [p.name for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
    others = [name for name in named[len(_LEADING_PARAMETERS) :] if name not in _CACHE_PARAMETERS]
    if named[: len(_LEADING_PARAMETERS)] != _LEADING_PARAMETERS or others:
        return f"its forward takes ({', '.join(named)}): it computes attention itself"
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return "its forward takes no **kwargs to pass on to the attention function"
    return None


def _attribute_problem(module: nn.Module) -> str | None:
    missing = [name for name in _ATTRIBUTES if not hasattr(module, name)]
    if missing:
        return f"it has no {', '.join(missing)}"
    if getattr(module.config, "is_decoder", True):
        return "it belongs to a decoder (it keeps a KV cache)"
    if not hasattr(module.config, "_attn_implementation"):
        return "its config names no attention implementation"
    return None


def _interface_problem(cls: type) -> str | None:
    defining = sys.modules.get(cls.__module__)
    if not all(hasattr(defining, name) for name in ("ALL_ATTENTION_FUNCTIONS", "eager_attention_forward")):
        return f"its module {cls.__module__} has no transformers attention interface (ALL_ATTENTION_FUNCTIONS, eager_attention_forward)"
    return None


def _describe(cls: type) -> str:
    if not cls.__module__.startswith("transformers."):
        return f"{cls.__module__}.{cls.__qualname__}"
    import transformers

    return f"{cls.__qualname__} of transformers {transformers.__version__}"


def _attention_function(hf_module, implementation: str):
    functions = hf_module.ALL_ATTENTION_FUNCTIONS
    if hasattr(functions, "get_interface"):
        return functions.get_interface(implementation, hf_module.eager_attention_forward)
    return hf_module.eager_attention_forward if implementation == "eager" else functions[implementation]


class StackedSelfAttention(nn.Module):
    """The self-attention of `attention` with q|k|v as one Linear (`qkv`, rows q then k then v)."""

    def __init__(self, attention: nn.Module, qkv: nn.Linear) -> None:
        super().__init__()
        self.qkv = qkv
        self.dropout = attention.dropout
        self.config = attention.config
        self.attention_head_size = attention.attention_head_size
        self.num_attention_heads = getattr(attention, "num_attention_heads", attention.all_head_size // attention.attention_head_size)
        self.all_head_size = attention.all_head_size
        self.scaling = attention.scaling
        self.is_causal = attention.is_causal
        self.is_decoder = False
        self.layer_idx = getattr(attention, "layer_idx", None)
        self.training = attention.training
        self._hf_module = sys.modules[type(attention).__module__]  # its attention functions

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        # a comprehension over the names, not `frozenset & kwargs.keys()`: TorchDynamo (torch 2.11)
        # cannot trace that reflected set operation and falls back to eager for the whole model
        cache = {name: kwargs.pop(name) for name in _CACHE_PARAMETERS if name in kwargs}
        if any(value is not None for name, value in cache.items() if name != "cache_position"):
            raise RuntimeError("StackedSelfAttention is an encoder layer: it takes no KV cache")
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.attention_head_size)
        q, k, v = (t.view(*hidden_shape).transpose(1, 2) for t in self.qkv(hidden_states).split(self.all_head_size, dim=-1))
        attend = _attention_function(self._hf_module, self.config._attn_implementation)
        out, weights = attend(
            self, q, k, v, attention_mask, dropout=0.0 if not self.training else self.dropout.p, scaling=self.scaling, **kwargs
        )
        return out.reshape(*input_shape, -1).contiguous(), weights

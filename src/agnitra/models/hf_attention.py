"""transformers' encoder self-attention (BERT family) over one stacked q|k|v Linear.

`BertSelfAttention` and its copies (RoBERTa, ...) in transformers 5 project the hidden states
three times, one small GEMM each. `StackedSelfAttention` does the same computation with one GEMM
over the stacked rows and then hands q, k, v to the same attention function the model chose
(`config._attn_implementation`), so masks, scaling and outputs are transformers' own. It takes
only what an encoder uses: a layer given a KV cache raises.
"""

from __future__ import annotations

import inspect
import sys

import torch
from torch import nn

# the forward this replacement mirrors (transformers 5.x); other versions are left alone
_FORWARD_PARAMETERS = ["self", "hidden_states", "attention_mask", "past_key_values", "kwargs"]
_ATTRIBUTES = ("query", "key", "value", "config", "attention_head_size", "all_head_size", "scaling", "is_causal", "dropout")


def encoder_self_attention(module: nn.Module) -> bool:
    """A transformers 5 encoder self-attention whose q/k/v are Linears this module can stack."""
    cls = type(module)
    if not cls.__module__.startswith("transformers.") or not cls.__name__.endswith("SelfAttention"):
        return False
    if not all(hasattr(module, a) for a in _ATTRIBUTES) or getattr(module.config, "is_decoder", True):
        return False
    return list(inspect.signature(cls.forward).parameters) == _FORWARD_PARAMETERS


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

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, past_key_values=None, **kwargs):
        if past_key_values is not None:
            raise RuntimeError("StackedSelfAttention is an encoder layer: it takes no KV cache")
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.attention_head_size)
        q, k, v = (t.view(*hidden_shape).transpose(1, 2) for t in self.qkv(hidden_states).split(self.all_head_size, dim=-1))
        attend = _attention_function(self._hf_module, self.config._attn_implementation)
        out, weights = attend(
            self, q, k, v, attention_mask, dropout=0.0 if not self.training else self.dropout.p, scaling=self.scaling, **kwargs
        )
        return out.reshape(*input_shape, -1).contiguous(), weights

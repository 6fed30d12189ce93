"""Helpers shared by the transformers-based zoo workloads: seeded construction on the target
device, and the attention-implementation switch ONNX export needs."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from agnitra.workloads.registry import BuildOptions


def build_seeded(make: Callable[[], nn.Module], options: BuildOptions, dtype: torch.dtype) -> nn.Module:
    """Construct `make()` on the target device with weights fixed by `options.seed`; eval mode.

    transformers initialises weights from the global RNG, so construction runs under a forked,
    seeded RNG (the caller's RNG state is left as it was).
    """
    device = torch.device(options.device)
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), device:
        torch.manual_seed(options.seed)
        model = make()
    return model.to(dtype).eval()


def set_attention(hf_model: nn.Module, implementation: str) -> Callable[[], None]:
    """Switch a transformers model's attention implementation; returns a function restoring it.

    ONNX Runtime's transformer optimizer fuses Attention only in the legacy TorchScript export
    (dynamo=False) of the eager attention; SDPA exports to a pattern it does not recognise.
    """
    previous = hf_model.config._attn_implementation
    if hasattr(hf_model, "set_attn_implementation"):
        hf_model.set_attn_implementation(implementation)
    else:  # older transformers
        hf_model.config._attn_implementation = implementation
    return lambda: set_attention(hf_model, previous) and None


def set_eager_attention(hf_model: nn.Module) -> Callable[[], None]:
    return set_attention(hf_model, "eager")

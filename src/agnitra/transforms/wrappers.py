"""Wrapper modules that runtime transforms put around a model, keeping its call signature.

`ModelWrapper.forward(*args, **kwargs)` forwards to the wrapped callable; attribute lookups the
wrapper does not answer fall through to the inner model, so a decoder's `setup_caches`,
`max_batch` and `config` stay reachable through any number of wrappers.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn


class ModelWrapper(nn.Module):
    def __init__(self, inner: nn.Module, call: Callable | None = None) -> None:
        super().__init__()
        self.inner = inner
        self._call = call

    def forward(self, *args, **kwargs):
        return (self._call if self._call is not None else self.inner)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self._modules.get("inner")
            if inner is None:
                raise
            return getattr(inner, name)


def map_floats(tree: Any, dtype: torch.dtype) -> Any:
    """Floating-point tensors in a nested structure cast to `dtype`; everything else as is."""

    def cast(x):
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype else x

    if hasattr(tree, "to_tuple") and hasattr(tree, "keys") and callable(tree.keys):  # HF ModelOutput
        for key in list(tree.keys()):
            tree[key] = map_floats(tree[key], dtype)
        return tree
    return torch.utils._pytree.tree_map(cast, tree)


class CastingWrapper(ModelWrapper):
    """Runs the inner model in `compute_dtype`: floating inputs cast in, outputs cast back."""

    def __init__(self, inner: nn.Module, compute_dtype: torch.dtype, output_dtype: torch.dtype) -> None:
        super().__init__(inner)
        self.compute_dtype = compute_dtype
        self.output_dtype = output_dtype

    def forward(self, *args, **kwargs):
        args, kwargs = map_floats((args, kwargs), self.compute_dtype)
        return map_floats(self.inner(*args, **kwargs), self.output_dtype)

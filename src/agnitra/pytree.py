"""The tensors in a nested value (tuples, lists, dicts, Hugging Face ModelOutputs), in order."""

from __future__ import annotations

from typing import Any, Iterator

import torch


def iter_tensors(tree: Any) -> Iterator[torch.Tensor]:
    for leaf in torch.utils._pytree.tree_leaves(tree):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def tensor_leaves(tree: Any) -> list[torch.Tensor]:
    """Every tensor in a nested output (tuples, dicts, HF ModelOutput), in order."""
    if hasattr(tree, "to_tuple") and callable(tree.to_tuple):  # transformers.ModelOutput
        tree = tree.to_tuple()
    return list(iter_tensors(tree))

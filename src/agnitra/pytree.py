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


def fresh_copy(tree: Any) -> Any:
    """The same nested value with every tensor cloned: a call that changes its inputs in place
    changes the copy, never the caller's tensors."""
    return torch.utils._pytree.tree_map(lambda leaf: leaf.clone() if isinstance(leaf, torch.Tensor) else leaf, tree)


def sequence_length(example: Any) -> int | None:
    """The sequence length of token inputs ([batch, sequence] integer tensors: ids, masks; all of one
    length of 4 or more), None where there are none: the dimension besides the batch that callers
    vary (a floating [batch, features] input's width is the model's own)."""
    lengths = {t.shape[1] for t in iter_tensors(example) if t.dim() == 2 and not t.is_floating_point()}
    return lengths.pop() if len(lengths) == 1 and min(lengths) >= 4 else None

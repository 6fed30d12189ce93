"""Exploring inputs: sets drawn to exercise the model, not to echo its example inputs.

Held-out sets resemble the example inputs, so a candidate that froze what it saw at build time (the
branch `if x.mean() > 0` took, a value read with `.item()`) can pass on them. Each exploring set is
judged on its own:

- `sign-flipped`: the example's floating inputs negated;
- `scaled x4`: the example's floating inputs times four;
- `zeros`: every floating input and every token id zero;
- `wide`: fresh draws with three times the example's spread around its mean, token ids uniform
  across the model's vocabulary where that is wider than the example's range: the smallest
  embedding table with a row for every example id (a larger table is another one's, RoBERTa's
  positions say: ids past the word table's end are a CUDA device-side assert, which ends the process).

Masks and flags (integer inputs of two values at most) keep the example's pattern in every set. A
set the original model does not take (an error, or NaN/Inf where the example's output is finite) is
left out and said, like any derived set.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from agnitra.workloads.base import Workload

SCALE = 4.0
WIDE_SPREAD = 3.0
WIDE_SEED = 30_000


def exploring_sets(workload: Workload) -> list[tuple[str, tuple]]:
    """(name, inputs) of every exploring set that changes something in this workload's inputs."""
    example = workload.example_inputs
    leaves = [t for t in torch.utils._pytree.tree_leaves(example) if isinstance(t, torch.Tensor) and t.numel()]
    has_float = any(t.is_floating_point() for t in leaves)
    has_ids = any(_token_ids(t) for t in leaves)
    vocabulary = _vocabulary(workload.model, example)
    sets = []
    if has_float:
        sets.append(("sign-flipped", _map_floats(example, lambda t: -t)))
        sets.append((f"scaled x{SCALE:g}", _map_floats(example, lambda t: t * SCALE)))
    if has_float or has_ids:
        sets.append(("zeros", _zeros(example)))
        generator = torch.Generator().manual_seed(WIDE_SEED)
        sets.append(("wide", torch.utils._pytree.tree_map(lambda leaf: _wide(leaf, generator, vocabulary), example)))
    return sets


def describe_wide(workload: Workload) -> str:
    vocabulary = _vocabulary(workload.model, workload.example_inputs)
    ids = f", token ids across the vocabulary of {vocabulary}" if vocabulary else ""
    return f"fresh draws with {WIDE_SPREAD:g}x the example's spread{ids}"


def _token_ids(t: torch.Tensor) -> bool:
    return not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool and t.unique().numel() > 2


def _map_floats(example: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return torch.utils._pytree.tree_map(lambda leaf: fn(leaf) if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() else leaf, example)


def _zeros(example: Any) -> Any:
    def zero(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or _token_ids(leaf)):
            return torch.zeros_like(leaf)
        return leaf

    return torch.utils._pytree.tree_map(zero, example)


def _wide(leaf: Any, generator: torch.Generator, vocabulary: int | None) -> Any:
    if not isinstance(leaf, torch.Tensor) or not leaf.numel():
        return leaf
    if leaf.is_floating_point():
        wide = leaf.detach().double().cpu()
        std = wide.std().item() if wide.numel() > 1 else 1.0
        values = torch.randn(leaf.shape, generator=generator, dtype=torch.float64) * (WIDE_SPREAD * (std or 1.0)) + wide.mean().item()
        return values.to(leaf.dtype).to(leaf.device)
    if _token_ids(leaf):
        high = int(leaf.max()) + 1
        if vocabulary and vocabulary > high:
            high = vocabulary
        return torch.randint(int(min(leaf.min(), 0)), high, tuple(leaf.shape), generator=generator).to(leaf.dtype).to(leaf.device)
    return leaf


def _vocabulary(model: nn.Module, example: Any) -> int | None:
    """The token ids the model takes: the rows of its smallest embedding table past every example
    id. The table the ids index is among those, so ids below its size are in range for it."""
    ids = [t for t in torch.utils._pytree.tree_leaves(example) if isinstance(t, torch.Tensor) and t.numel() and _token_ids(t)]
    if not ids or not isinstance(model, nn.Module):
        return None
    largest = max(int(t.max()) for t in ids)
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding) and m.num_embeddings > largest]
    return min(sizes) if sizes else None

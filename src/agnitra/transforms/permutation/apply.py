"""Permutations applied to a model's weights: each free space's permutation moves every axis in
it, and the composites it is a factor of (an attention projection's heads x head size) take the
permutation it induces. The model computes the same function afterwards (up to the order of
floating-point sums)."""

from __future__ import annotations

import torch
from torch import nn

from agnitra.transforms.permutation.spaces import Space, Spaces


def induced(spaces: Spaces, space: Space, chosen: dict[int, torch.Tensor]) -> torch.Tensor | None:
    """The index order of `space` under the chosen permutations (None: unchanged): its own, or
    the row-major product of its factors' (a factor left unchanged keeps its order)."""
    if space.id in chosen:
        return chosen[space.id]
    if not space.factors:
        return None
    parts = [spaces.spaces[f] for f in space.factors]
    orders = [induced(spaces, p, chosen) for p in parts]
    if all(o is None for o in orders):
        return None
    index = torch.zeros((), dtype=torch.long)
    for part, order in zip(parts, orders):
        order = order if order is not None else torch.arange(part.size)
        index = index.unsqueeze(-1) * part.size + order  # row-major: the first factor outermost
    return index.reshape(-1)


def permute_weights(model: nn.Module, spaces: Spaces, chosen: dict[int, torch.Tensor], in_place: bool = True) -> int:
    """Reorder every weight and buffer axis of a space the chosen permutations move (`chosen`:
    space id -> new order, a permutation of range(size)); returns how many axes moved. In place,
    or (`in_place=False`) into new tensors set under every name that shared the old one's storage,
    so that another model holding the old tensors (the user's, beside a patcher's copy) keeps them."""
    for space_id, order in chosen.items():
        space = spaces.spaces[space_id]
        if not space.free:
            raise ValueError(f"{space.describe()} cannot be permuted: {'; '.join(space.frozen) or 'it is a product of other spaces'}")
        if sorted(order.tolist()) != list(range(space.size)):
            raise ValueError(f"not a permutation of {space.size} channels")
    tensors = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    if not in_place:
        tensors = _fresh_storage(model, tensors, spaces, chosen)
    moved = 0
    done: set[tuple[int, int]] = set()  # (storage of a tied weight, dim): moved once
    for space in spaces.spaces.values():
        order = induced(spaces, space, chosen)
        if order is None:
            continue
        for axis in space.axes:
            tensor = tensors.get(axis.name)
            if tensor is None:
                raise ValueError(f"the model has no weight or buffer '{axis.name}'")
            key = (tensor.untyped_storage().data_ptr(), axis.dim)
            if key in done:
                continue
            done.add(key)
            with torch.no_grad():
                tensor.copy_(tensor.index_select(axis.dim, order.to(tensor.device)))
            moved += 1
    return moved


def _fresh_storage(model: nn.Module, tensors: dict[str, torch.Tensor], spaces: Spaces, chosen: dict[int, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of each tensor an axis to be moved belongs to, set on the model under every name that
    held it (tied weights stay tied); the others as they were."""
    moving = {axis.name for space in spaces.spaces.values() if induced(spaces, space, chosen) is not None for axis in space.axes}
    copies: dict[int, torch.Tensor] = {}
    for name in moving:
        tensor = tensors.get(name)
        if tensor is not None and id(tensor) not in copies:
            data = tensor.detach().clone()
            copies[id(tensor)] = nn.Parameter(data, requires_grad=tensor.requires_grad) if isinstance(tensor, nn.Parameter) else data
    fresh = dict(tensors)
    for name, tensor in tensors.items():
        if id(tensor) in copies:
            set_tensor(model, name, copies[id(tensor)])
            fresh[name] = copies[id(tensor)]
    return fresh


def set_tensor(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    """`tensor` as the model's parameter or buffer `name` (the submodule's own entry replaced)."""
    owner_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    (owner._parameters if attr in owner._parameters else owner._buffers)[attr] = tensor


def random_orders(spaces: Spaces, seed: int = 0) -> dict[int, torch.Tensor]:
    """A random permutation of every free space (for tests and for the solver's restarts)."""
    generator = torch.Generator().manual_seed(seed)
    return {s.id: torch.randperm(s.size, generator=generator) for s in spaces.free}

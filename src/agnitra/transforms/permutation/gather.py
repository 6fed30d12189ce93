"""Input orders of a layer's own: a Linear that gathers its input channels in the order its weight
wants (`GatheredLinear`), for the layers that read a channel space many layers read (a
transformer's residual stream). One order of that space must serve every reader, and the more
rows share it the less of a step's cost it removes (docs/layout.md); a gather per reader costs a
copy of its input at run time instead."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from agnitra.transforms.base import replace_modules
from agnitra.transforms.permutation.spaces import Spaces


class GatheredLinear(nn.Linear):
    """y = x[..., input_order] @ weight.T + bias: the weight's columns stored in `input_order`'s
    order. Its own forward, so the weight-format transforms that convert plain Linears pass it
    over (`as_wrapped` hands its Linear to them)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.index_select(-1, self.input_order), self.weight, self.bias)


def gathered(linear: nn.Linear) -> GatheredLinear:
    """`linear` (its parameters, not copies) reading its input in the identity order."""
    module = GatheredLinear(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
    module.weight, module.bias = linear.weight, linear.bias
    module.register_buffer("input_order", torch.arange(linear.in_features, device=linear.weight.device))
    return module.train(linear.training)


@dataclass
class Readers:
    """Layers whose input channels no free order of their own reaches, by the space they read."""

    shared: dict[int, list[str]]  # a free space other changed layers read too (the residual stream)
    fixed: dict[int, list[str]]  # a frozen space that is no product of heads (e.g. one reaching the model's outputs)

    @property
    def names(self) -> list[str]:
        return [name for names in (*self.shared.values(), *self.fixed.values()) for name in names]

    def describe(self, spaces: Spaces) -> str:
        kinds = [f"of {len(self.shared)} channel space(s) up to {max(len(n) for n in self.shared.values())} layers share"] if self.shared else []
        kinds += [f"of {len(self.fixed)} that cannot move ({spaces.spaces[next(iter(self.fixed))].frozen[0]})"] if self.fixed else []
        return " and ".join(kinds)


def unreachable_readers(spaces: Spaces, layers: dict[str, nn.Module]) -> Readers:
    """Of `layers`, those reading a free space another of them reads too, or a frozen space that
    no product of heads is made of (a head's composite is moved through its factors)."""
    reading: dict[int, list[str]] = {}
    for space in spaces.spaces.values():
        for axis in space.axes:
            name = axis.name.removesuffix(".weight")
            if axis.dim == 1 and name in layers and name not in reading.get(space.id, []):
                reading.setdefault(space.id, []).append(name)
    shared = {i: names for i, names in reading.items() if spaces.spaces[i].free and len(names) > 1}
    fixed = {i: names for i, names in reading.items() if spaces.spaces[i].frozen and not spaces.spaces[i].part_of and not spaces.spaces[i].factors}
    return Readers(shared, fixed)


def gather_readers(model: nn.Module, names: list[str], copy_weights: bool = False) -> int:
    """The named plain Linear layers replaced by gathered ones (in place in `model`; `copy_weights`:
    with their own copies of the weights, for a patcher's copy that shares the user's); how many were."""
    wanted = set(names)

    def build(_name: str, linear: nn.Linear) -> GatheredLinear:
        module = gathered(linear)
        if copy_weights:
            module.weight = nn.Parameter(linear.weight.detach().clone(), requires_grad=linear.weight.requires_grad)
        return module

    return replace_modules(model, lambda name, module: name in wanted and type(module) is nn.Linear, build)


def reorder_inputs(model: nn.Module, orders: dict[str, torch.Tensor]) -> None:
    """Each named GatheredLinear's columns and gather moved by `order` (new position i holds the
    old column order[i]): the layer computes what it did."""
    with torch.no_grad():
        for name, order in orders.items():
            module = model.get_submodule(name)
            order = order.to(module.weight.device)
            module.weight.copy_(module.weight.index_select(1, order))
            module.input_order.copy_(module.input_order.index_select(0, order))


class _Gather(nn.Module):
    """A gather in front of a plain Linear, which a weight-format transform may then convert."""

    def __init__(self, order: torch.Tensor, linear: nn.Linear) -> None:
        super().__init__()
        self.register_buffer("order", order)
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.index_select(-1, self.order))


def as_wrapped(model: nn.Module) -> int:
    """Every GatheredLinear in `model` as a gather in front of a plain Linear (same parameters),
    for serving by a weight-format kernel; how many were."""
    return replace_modules(model, lambda _name, module: isinstance(module, GatheredLinear), lambda _name, module: _Gather(module.input_order, _plain(module)))


def _plain(module: nn.Linear) -> nn.Linear:
    """A plain nn.Linear holding `module`'s parameters (not copies)."""
    linear = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
    linear.weight, linear.bias = module.weight, module.bias
    return linear

"""The channel orders one state transform wants: the Linear layers it changes, their input
channels' activation norms on calibration inputs (what pruning and the solver weigh a weight by,
as Wanda does), each free space's order of least cost for the step (from the cache where it holds
them), and the permutation applied only once the model's outputs are shown unchanged by it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from agnitra.transforms.permutation.apply import permute_weights, set_tensor
from agnitra.transforms.permutation.cache import PermutationCache, space_label
from agnitra.transforms.permutation.costs import InUnits
from agnitra.transforms.permutation.gather import GatheredLinear, reorder_inputs
from agnitra.transforms.permutation.solver import solve
from agnitra.transforms.permutation.spaces import Spaces
from agnitra.transforms.permutation.steps import StateStep


@dataclass
class Orders:
    """What the solver chose for one step: space id -> new order, and the share of the step's cost removed."""

    chosen: dict[int, torch.Tensor] = field(default_factory=dict)
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # a gathered layer's name -> its new input order (gather.reorder_inputs)
    gain: float = 0.0
    notes: list[str] = field(default_factory=list)


def targets(model: nn.Module, spaces: Spaces, step: StateStep, heads: bool = False) -> dict[str, nn.Linear]:
    """The Linear layers a step changes: every one it fits, but (unless `heads`) a head whose
    outputs are the model's own (a classifier, an LM head: left at full precision, as is the
    practice of the layout pipeline; the search's weight formats convert heads too)."""
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and step.fits(module.weight) and (heads or f"{name}.weight" not in spaces.heads):
            found[name] = module
    return found


def left_out(model: nn.Module, spaces: Spaces, step: StateStep) -> dict[str, nn.Linear]:
    """The Linear layers (heads aside) a step does not fit: their shapes do not divide into its groups."""
    return {name: module for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and not step.fits(module.weight) and f"{name}.weight" not in spaces.heads}


def calibration_pass(model: nn.Module, inputs: list[tuple], hooks: dict[nn.Module, object]) -> None:
    """Every calibration batch through the model, each module's hook reading its inputs (a
    forward pre-hook), the hooks removed after."""
    handles = [module.register_forward_pre_hook(hook) for module, hook in hooks.items()]
    try:
        with torch.no_grad():
            for batch in inputs:
                model(*batch)
    finally:
        for handle in handles:
            handle.remove()


def activation_norms(model: nn.Module, inputs: list[tuple], names: list[str]) -> dict[str, torch.Tensor]:
    """Each named Linear's input channels' L2 norm over every calibration token."""
    sums: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())

    def recorder(name: str):
        def record(module, args):
            x = args[0].detach()
            if isinstance(module, GatheredLinear):  # its weight's columns are in its gather's order
                x = x.index_select(-1, module.input_order)
            x = x.float().reshape(-1, x.shape[-1])
            sums[name] = sums.get(name, 0) + (x**2).sum(0).cpu()
        return record

    calibration_pass(model, inputs, {modules[name]: recorder(name) for name in names})
    return {name: total.sqrt() for name, total in sums.items()}


def solve_orders(model: nn.Module, spaces: Spaces, layers: dict[str, nn.Linear], norms: dict[str, torch.Tensor], step: StateStep, unit: int,
                 seconds: float, seed: int = 0, cache: PermutationCache | None = None, calibration: list[tuple] = ()) -> Orders:
    """Each free space a changed layer reads, and each changed layer that gathers its input
    (`gather.GatheredLinear`), gets the order of least cost for `step`, moving whole units of
    `unit` channels (groups an earlier step fixed); the cache's orders where it has them."""
    result = Orders()
    read = [(space, [name for name in layers if any(a.name == f"{name}.weight" and a.dim == 1 for a in space.axes)]) for space in spaces.free]
    read = [(space, readers) for space, readers in read if readers]
    read = _spaces_for(step, read, result.notes)
    read += [(name, [name]) for name, layer in layers.items() if isinstance(layer, GatheredLinear)]
    labels = {_label(item): item for item, _ in read}
    key = cache.key(model, step.text, unit, seconds, calibration) if cache is not None else None
    cached = cache.get(key) if cache is not None else None
    if cache is not None:
        result.notes += cache.notes
        cache.notes.clear()
    if cached is not None:
        for label, order in cached[0].items():
            if label in labels:
                _choose(result, labels[label], torch.tensor(order))
        result.gain = cached[1]
        result.notes.append(f"{step.text}: the permutations of an earlier run under the same conditions were reused")
        return result
    before_cost = after_cost = 0.0
    solved = {}
    work = [sum(layers[n].weight.numel() for n in readers) for _, readers in read]  # what scoring an order costs
    for (item, readers), size in zip(read, work):
        cost = step.cost([layers[n].weight for n in readers], [norms.get(n) for n in readers])
        if unit > 1:
            cost = InUnits(cost, unit)
        share = 0.5 / len(read) + 0.5 * size / sum(work)  # half the time evenly, half by the weights it reads
        solution = solve(cost, seconds=seconds * share, seed=seed)
        if solution.cost < solution.identity_cost:
            solved[_label(item)] = order = cost.channel_order(solution.order) if unit > 1 else solution.order
            _choose(result, item, order)
            before_cost += solution.identity_cost
            after_cost += solution.cost
    result.gain = (1 - after_cost / before_cost) if before_cost > 0 else 0.0
    if cache is not None:
        cache.put(key, {label: order.tolist() for label, order in solved.items()}, result.gain)
    return result


def _label(item) -> str:
    """A solved item's name in the cache: a space's label, or a gathered layer's own."""
    return f"input order of {item}" if isinstance(item, str) else space_label(item)


def _choose(result: Orders, item, order: torch.Tensor) -> None:
    if isinstance(item, str):
        result.inputs[item] = order
    else:
        result.chosen[item.id] = order


def outputs(model: nn.Module, batch: tuple) -> list[torch.Tensor]:
    from agnitra.workloads.base import tensor_leaves

    with torch.no_grad():
        return [t.detach().float().clone() for t in tensor_leaves(model(*batch))]


def same_outputs(got: list[torch.Tensor], expected: list[torch.Tensor], eps: float = 0.0) -> bool:
    """Equal up to the order of floating-point sums: at float32 within 1e-3, at a coarser
    precision (`eps`: its machine epsilon, bf16's 7.8e-3) within what reassociation moves there."""
    rtol = max(1e-3, 8 * eps)
    return len(got) == len(expected) and all(
        g.shape == e.shape and torch.allclose(g, e, rtol=rtol, atol=rtol * 0.1 * max(1.0, e.abs().max().item())) for g, e in zip(got, expected))


def compute_eps(model: nn.Module) -> float:
    """The machine epsilon of the model's floating-point weights (the precision its sums run at)."""
    for p in model.parameters():
        if p.is_floating_point():
            return torch.finfo(p.dtype).eps
    return 0.0


def _spaces_for(step: StateStep, read: list[tuple], notes: list[str]) -> list[tuple]:
    """The spaces whose order the step's cost may set. Weight groups: those one layer reads; a space
    many layers read (the residual stream) stays in its order: on tinylm-py its solved order lowered
    the groups' error and every layer's output error, yet raised the held-out loss (int3 g32:
    +0.45 points, int4 g32 +0.10), where the single-reader spaces' orders lowered it (docs/layout.md)."""
    if step.kind != "quant":
        return read
    shared = [(space, readers) for space, readers in read if len(readers) > 1]
    if shared:
        widest = max(len(readers) for _, readers in shared)
        notes.append(f"{step.text}: {len(shared)} channel space(s) read by several layers (up to {widest}: the residual stream) left in their order; "
                     "a shared order raised the held-out loss of weight groups")
    return [(space, readers) for space, readers in read if len(readers) == 1]


def permute_checked(model: nn.Module, spaces: Spaces, chosen: dict[int, torch.Tensor], checks: list[tuple], in_place: bool = True,
                    inputs: dict[str, torch.Tensor] | None = None) -> str:
    """Apply the orders (and the gathered layers' `inputs` orders, in place) if the outputs on
    `checks` stay as they were; '' when applied, else why not (the model is then as it was).
    `in_place=False` gives moved tensors new storage (a patcher's copy shares the original's tensors)."""
    reference = [outputs(model, batch) for batch in checks]
    saved = {name: t for name, t in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))}
    backup = None if not in_place else {name: t.detach().clone() for name, t in saved.items()}
    permute_weights(model, spaces, chosen, in_place=in_place)
    reorder_inputs(model, inputs or {})
    eps = compute_eps(model)
    if all(same_outputs(outputs(model, batch), expected, eps) for batch, expected in zip(checks, reference)):
        return ""
    if in_place:
        with torch.no_grad():
            for name, tensor in saved.items():
                tensor.copy_(backup[name])
    else:
        for name, tensor in saved.items():
            set_tensor(model, name, tensor)
    return "the permutation changed the model's outputs; rolled back to the previous layout"

"""The layout pipeline: state transforms applied in order to a copy of the model, with the
channels permuted never (`none`), once before the first (`once`), or before each one for the
model's state at that point (`iterative`). Each permutation is checked to leave the model's
outputs as they were before it is kept; one that does not is rolled back and the cause noted.

Pruning keeps the weights of most importance (the magnitude of a weight times its input
channel's activation norm on the calibration inputs, as Wanda prunes), which is what the solver's
cost counts. For each step the record says, over the Linear layers it changed: the importance kept
and the relative error of the weights it changed, so that modes compare at equal compression."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from agnitra.relayout.cache import PermutationCache, space_label
from agnitra.relayout.steps import StateStep
from agnitra.transforms.permutation.apply import permute_weights
from agnitra.transforms.permutation.costs import InUnits
from agnitra.transforms.permutation.solver import solve
from agnitra.transforms.permutation.spaces import Spaces, find_spaces

MODES = ("none", "once", "iterative")


@dataclass
class StepRecord:
    step: str
    permuted_spaces: int  # spaces whose order the solver changed for this step
    solver_gain: float  # the share of the step's cost the new orders removed (0 without a permutation)
    importance_kept: float  # over the changed layers: sum |W'| * norm / sum |W| * norm
    weight_error: float  # ||(W' - W) * norm|| / ||W * norm||
    layers: int
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass
class LayoutRun:
    mode: str
    steps: list[StepRecord]
    model: nn.Module | None = None  # the transformed copy

    def to_dict(self) -> dict:
        return {"mode": self.mode, "steps": [asdict(s) for s in self.steps]}


def targets(model: nn.Module, spaces: Spaces, step: StateStep) -> dict[str, nn.Linear]:
    """The Linear layers a step changes: every one it fits, but a head whose outputs are the
    model's own (a classifier, an LM head: left at full precision, as is the practice)."""
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and step.fits(module.weight) and f"{name}.weight" not in spaces.heads:
            found[name] = module
    return found


def activation_norms(model: nn.Module, inputs: list[tuple], names: list[str]) -> dict[str, torch.Tensor]:
    """Each named Linear's input channels' L2 norm over every calibration token."""
    sums: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())
    hooks = []
    for name in names:
        def record(_module, args, name=name):
            x = args[0].detach().float().reshape(-1, args[0].shape[-1])
            sums[name] = sums.get(name, 0) + (x**2).sum(0)
        hooks.append(modules[name].register_forward_pre_hook(record))
    try:
        with torch.no_grad():
            for batch in inputs:
                model(*batch)
    finally:
        for hook in hooks:
            hook.remove()
    return {name: total.sqrt() for name, total in sums.items()}


def run_layout(model: nn.Module, calibration: list[tuple], steps: list[StateStep], mode: str, *, solve_seconds: float = 20.0,
               seed: int = 0, cache: PermutationCache | None = None) -> LayoutRun:
    """The steps applied to a copy of `model` in `mode` (the original is left as it is); `cache`
    keeps each step's permutations and gives them back under the same conditions."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}; one of {', '.join(MODES)}")
    work = copy.deepcopy(model).eval()
    records = []
    for index, step in enumerate(steps):
        started = time.monotonic()
        spaces = find_spaces(work, calibration[0])
        layers = targets(work, spaces, step)
        norms = activation_norms(work, calibration, list(layers))
        notes: list[str] = []
        permuted, gain = 0, 0.0
        unit = _fixed_unit(steps[:index])
        if step.ordered and (mode == "iterative" or (mode == "once" and index == 0)):
            if step.group % unit:
                notes.append(f"{step.text}: not permuted: its groups of {step.group} would break the groups of {unit} the earlier steps fixed")
            else:
                permuted, gain = _permute_for(work, spaces, layers, norms, step, unit, calibration, solve_seconds, seed, notes, cache)
            norms = activation_norms(work, calibration, list(layers)) if permuted else norms
        kept, error = _apply(layers, norms, step)
        records.append(StepRecord(step.text, permuted, gain, kept, error, len(layers), round(time.monotonic() - started, 2), notes))
    return LayoutRun(mode, records, work)


def _fixed_unit(earlier: list[StateStep]) -> int:
    """Channels the earlier steps bound together (their groups' least common multiple): a later
    permutation moves only whole units, or the 2:4 pattern or a scale's group would break."""
    unit = 1
    for step in earlier:
        if step.group:
            unit = math.lcm(unit, step.group)
    return unit


def _permute_for(model, spaces: Spaces, layers, norms, step: StateStep, unit: int, calibration, seconds: float, seed: int, notes: list[str],
                 cache: PermutationCache | None = None) -> tuple[int, float]:
    """Each free space that a changed layer reads gets the order of least cost for `step` (from
    the cache where it holds them); the model's outputs are checked unchanged before it is kept
    (rolled back otherwise)."""
    chosen, before_cost, after_cost = {}, 0.0, 0.0
    read = [(space, [name for name in layers if any(a.name == f"{name}.weight" and a.dim == 1 for a in space.axes)]) for space in spaces.free]
    read = [(space, readers) for space, readers in read if readers]
    key = cache.key(model, step.text, unit, seconds) if cache is not None else None
    cached = cache.get(key) if cache is not None else None
    if cache is not None:
        notes += cache.notes
        cache.notes.clear()
    if cached is not None:
        labels = {space_label(space): space for space, _ in read}
        chosen = {labels[label].id: torch.tensor(order) for label, order in cached[0].items() if label in labels}
        notes.append(f"{step.text}: the permutations of an earlier run under the same conditions were reused")
        read = []
    for space, readers in read:
        cost = step.cost([layers[n].weight for n in readers], [norms.get(n) for n in readers])
        if unit > 1:
            cost = InUnits(cost, unit)
        solution = solve(cost, seconds=seconds / len(read), seed=seed)
        if solution.cost < solution.identity_cost:
            chosen[space.id] = cost.channel_order(solution.order) if unit > 1 else solution.order
            before_cost += solution.identity_cost
            after_cost += solution.cost
    gain = cached[1] if cached is not None else (1 - after_cost / before_cost) if before_cost > 0 else 0.0
    if cache is not None and cached is None:
        by_id = {space.id: space for space in spaces.free}
        cache.put(key, {space_label(by_id[i]): order.tolist() for i, order in chosen.items()}, gain)
    if not chosen:
        return 0, 0.0
    saved = copy.deepcopy(model.state_dict())
    reference = [_outputs(model, batch) for batch in calibration[:2]]
    permute_weights(model, spaces, chosen)
    for batch, expected in zip(calibration[:2], reference):
        got = _outputs(model, batch)
        if not all(torch.allclose(g, e, rtol=1e-3, atol=1e-4 * max(1.0, e.abs().max().item())) for g, e in zip(got, expected)):
            model.load_state_dict(saved)
            notes.append(f"{step.text}: the permutation changed the model's outputs; rolled back to the previous layout")
            return 0, 0.0
    return len(chosen), gain


def _outputs(model, batch) -> list[torch.Tensor]:
    from agnitra.workloads.base import tensor_leaves

    with torch.no_grad():
        return [t.detach().float().clone() for t in tensor_leaves(model(*batch))]


def _apply(layers: dict[str, nn.Linear], norms: dict[str, torch.Tensor], step: StateStep) -> tuple[float, float]:
    kept_num = kept_den = err_num = err_den = 0.0
    for name, layer in layers.items():
        before = layer.weight.detach().float().clone()
        step.apply(layer.weight, norms.get(name))
        after = layer.weight.detach().float()
        scale = norms.get(name)
        scale = scale if scale is not None else torch.ones(before.shape[1])
        kept_num += float((after.abs() * scale).sum())
        kept_den += float((before.abs() * scale).sum())
        err_num += float((((after - before) * scale) ** 2).sum())
        err_den += float(((before * scale) ** 2).sum())
    return (kept_num / kept_den if kept_den else 1.0), ((err_num / err_den) ** 0.5 if err_den else 0.0)

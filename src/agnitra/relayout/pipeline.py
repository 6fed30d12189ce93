"""The layout pipeline: state transforms applied in order to a copy of the model, with the
channels permuted never (`none`), once before the first (`once`), or before each one for the
model's state at that point (`iterative`), or as iterative with the layers that read a channel
space other layers read too (the residual stream) each given an input order of its own, gathered
at run time (`gathered`, `transforms/permutation/gather.py`). Each permutation is checked to leave the model's
outputs as they were before it is kept; one that does not is rolled back and the cause noted.

Pruning keeps the weights of most importance (the magnitude of a weight times its input
channel's activation norm on the calibration inputs, as Wanda prunes), which is what the solver's
cost counts. For each step the record says, over the Linear layers it changed: the importance kept
and the relative error of the weights it changed, so that modes compare at equal compression.

A KV-cache step (`kv:...`, `transforms/permutation/kv.py`) changes no weight: it orders each key
and value head's channels for the cache's groups (q's and k's rows with the rotary frequencies,
v's rows with the output projection's columns) and installs a compressed cache; its record says
the cache's bytes before and after, the importance kept by pruning and the cache's weighted
reconstruction error on the calibration keys and values (in `weight_error`)."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from agnitra.transforms.permutation import kv
from agnitra.transforms.permutation.cache import PermutationCache
from agnitra.transforms.permutation.gather import gather_readers, unreachable_readers
from agnitra.transforms.permutation.order import activation_norms, left_out, permute_checked, solve_orders, targets
from agnitra.transforms.permutation.spaces import Spaces, find_spaces
from agnitra.transforms.permutation.steps import StateStep

__all__ = ["MODES", "LayoutRun", "StepRecord", "activation_norms", "run_layout", "targets"]

MODES = ("none", "once", "iterative", "gathered")
# what a step's notes say that holds for the whole report (its other notes stay with the step)
REPORTED = (": refused: ", "the KV cache held as", "layers left as they were", "left in their order", "through a gather")


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
    cache_bytes_before: int | None = None  # a kv step: the KV cache's bytes before and after it
    cache_bytes_after: int | None = None
    weights_changed: int = 0  # weight elements of the layers it changed
    weights_left: int = 0  # and of the layers (heads aside) whose shapes its groups do not divide: left as they were


@dataclass
class LayoutRun:
    mode: str
    steps: list[StepRecord]
    model: nn.Module | None = None  # the transformed copy

    def to_dict(self) -> dict:
        return {"mode": self.mode, "steps": [asdict(s) for s in self.steps]}


def reported_notes(runs) -> list[str]:
    """The notes of every mode's steps that the report says once, sorted: refusals, the KV cache's
    format, layers the groups do not fit, spaces left in their order."""
    return sorted({n for run in runs for s in run.steps for n in s.notes if any(marker in n for marker in REPORTED)})


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
        if step.kind == "kv":
            permute = mode == "iterative" or (mode == "once" and index == 0)
            records.append(_kv_step(work, calibration, step, _fixed_unit(steps[:index]), permute, solve_seconds, seed, started))
            continue
        with kv.plain_caches(work):  # a compressed KV cache of an earlier step is back after this one
            permute = step.ordered and (mode in ("iterative", "gathered") or (mode == "once" and index == 0))
            records.append(_weight_step(work, calibration, step, _fixed_unit(steps[:index]), permute, solve_seconds, seed, cache, started,
                                        gather=mode == "gathered"))
    return LayoutRun(mode, records, work)


def _weight_step(work: nn.Module, calibration, step: StateStep, unit: int, permute: bool, solve_seconds: float, seed: int,
                 cache: PermutationCache | None, started: float, gather: bool = False) -> StepRecord:
    spaces = find_spaces(work, calibration[0])
    layers = targets(work, spaces, step)
    notes: list[str] = []
    if gather and permute and not step.group % unit and _gather_shared(work, spaces, layers, step, notes):
        spaces = find_spaces(work, calibration[0])
        layers = targets(work, spaces, step)
    norms = activation_norms(work, calibration, list(layers))
    unfit = left_out(work, spaces, step)
    if unfit:
        shapes = ", ".join(sorted({f"{m.out_features}x{m.in_features}" for m in unfit.values()}))
        notes.append(f"{step.text}: {len(unfit)} of {len(unfit) + len(layers)} layers left as they were: their shapes ({shapes}) do not divide into its groups of {step.group}")
    permuted, gain = 0, 0.0
    if permute:
        if step.group % unit:
            notes.append(f"{step.text}: not permuted: its groups of {step.group} would break the groups of {unit} the earlier steps fixed")
        else:
            permuted, gain = _permute_for(work, spaces, layers, norms, step, unit, calibration, solve_seconds, seed, notes, cache)
        norms = activation_norms(work, calibration, list(layers)) if permuted else norms
    kept, error = _apply(layers, norms, step)
    return StepRecord(step.text, permuted, gain, kept, error, len(layers), round(time.monotonic() - started, 2), notes,
                      weights_changed=sum(m.weight.numel() for m in layers.values()), weights_left=sum(m.weight.numel() for m in unfit.values()))


def _gather_shared(work: nn.Module, spaces: Spaces, layers: dict[str, nn.Linear], step: StateStep, notes: list[str]) -> int:
    """The changed layers no order of their own could reach made to gather their input
    (`gather.unreachable_readers`); how many were, said in the notes."""
    readers = unreachable_readers(spaces, layers)
    count = gather_readers(work, readers.names)
    if count:
        notes.append(f"{step.text}: {count} layers read their input through a gather in an order of their own (the readers {readers.describe(spaces)}): "
                     "a copy of each one's input at run time, in the measured latency")
    return count


def _fixed_unit(earlier: list[StateStep]) -> int:
    """Channels the earlier steps bound together (their groups' least common multiple): a later
    permutation moves only whole units, or the 2:4 pattern or a scale's group would break."""
    unit = 1
    for step in earlier:
        if step.group and step.kind != "kv":  # a kv step's groups are the cache's, over channels no weight step moves
            unit = math.lcm(unit, step.group)
    return unit


def _permute_for(model, spaces: Spaces, layers, norms, step: StateStep, unit: int, calibration, seconds: float, seed: int, notes: list[str],
                 cache: PermutationCache | None = None) -> tuple[int, float]:
    """The step's orders solved (or taken from the cache) and applied, once the model's outputs
    are shown unchanged by them (rolled back otherwise)."""
    orders = solve_orders(model, spaces, layers, norms, step, unit, seconds, seed, cache, calibration)
    notes += orders.notes
    if not orders.chosen and not orders.inputs:
        return 0, 0.0
    why_not = permute_checked(model, spaces, orders.chosen, calibration[:2], inputs=orders.inputs)
    if why_not:
        notes.append(f"{step.text}: {why_not}")
        return 0, 0.0
    return len(orders.chosen) + len(orders.inputs), orders.gain


def _kv_step(model: nn.Module, calibration, step: StateStep, unit: int, permute: bool, seconds: float, seed: int, started: float) -> StepRecord:
    """A KV-cache step: the heads' channels ordered for it (when `permute`), then the compressed
    cache installed; refused with the reason where the model has no cache it can replace."""
    why = kv.refusal(model, step)
    if why:
        return StepRecord(step.text, 0, 0.0, 1.0, 0.0, 0, round(time.monotonic() - started, 2), [f"{step.text}: refused: {why}"])
    captured = kv.capture(model, calibration)
    notes: list[str] = []
    permuted, gain = 0, 0.0
    permute = permute and bool(step.bits)  # pruning keeps channels by importance wherever they sit
    if permute and any(m.kv_format is not None and m.kv_format.k_keep is not None for m in kv.attentions(model).values()):
        notes.append(f"{step.text}: not permuted: an earlier kv:prune fixed which channels the cache stores")
    elif permute:
        orders = kv.solve_kv(model, captured, step, unit, seconds, seed)
        notes += orders.notes
        why_not = kv.permute_kv(model, orders, calibration[:2])
        if why_not:
            notes.append(f"{step.text}: {why_not}")
        elif orders.chosen:
            permuted, gain = orders.heads, orders.gain
            captured = kv.capture(model, calibration)
    done = kv.install(model, step, captured)
    return StepRecord(step.text, permuted, gain, done.kept, done.error, len(kv.attentions(model)), round(time.monotonic() - started, 2), notes + done.notes,
                      done.bytes_before, done.bytes_after)


def _apply(layers: dict[str, nn.Linear], norms: dict[str, torch.Tensor], step: StateStep) -> tuple[float, float]:
    kept_num = kept_den = err_num = err_den = 0.0
    for name, layer in layers.items():
        before = layer.weight.detach().float().clone()
        step.apply(layer.weight, norms.get(name))
        after = layer.weight.detach().float()
        scale = norms.get(name)
        scale = scale.to(before.device) if scale is not None else torch.ones(before.shape[1], device=before.device)
        kept_num += float((after.abs() * scale).sum())
        kept_den += float((before.abs() * scale).sum())
        err_num += float((((after - before) * scale) ** 2).sum())
        err_den += float(((before * scale) ** 2).sum())
    return (kept_num / kept_den if kept_den else 1.0), ((err_num / err_den) ** 0.5 if err_den else 0.0)

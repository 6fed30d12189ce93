"""The inputs a benchmark times and verifies on, apart from those candidates are built with.

Candidates are built, exported and calibrated on the workload's example inputs (a recipe's
calibration on other seeds of `make_inputs` where the workload has one). Verification uses:

- held-out sets: the workload's real check data (`check_inputs`), else `HELD_OUT_SETS` fresh sets
  of the example's shapes (`Workload.inputs(seed)`: the workload's `make_inputs`, else values
  derived from the example inputs, `like_inputs`), so a candidate that froze what it saw at build
  time (a branch, a constant) is caught;
- exploring sets (bench.explore: sign-flipped, scaled, zeros, a wide spread and token ids across
  the vocabulary), each judged on its own: the inputs a frozen branch answers wrongly;
- another shape: the example inputs at another batch size and, for token inputs, a shorter
  sequence (batch + 1 x 3/4 of the sequence, else batch + 1, else 2 x batch) where the original
  model accepts it: a candidate that fails or differs there fails verification.

Every call gets its own copies of its inputs (a model may change them in place:
workloads.behaviour).

The timed runs rotate through the example inputs and fresh sets of other seeds. Derived sets the
original model rejects (or turns NaN/Inf where the example inputs do not) are left out and said:
they are not inputs the model takes. Decoders are verified on teacher-forced logits (the harness).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from agnitra.bench.explore import describe_wide, exploring_sets
from agnitra.errors import first_line
from agnitra.pytree import fresh_copy, sequence_length
from agnitra.verify import check_reference
from agnitra.workloads.base import Workload, like_inputs, tensor_leaves
from agnitra.workloads.behaviour import Behaviour, ensure_behaviour

HELD_OUT_SEED = 10_000  # held-out sets are seeds 10000, 10001, ...; never used to build or time
HELD_OUT_SETS = 3
OTHER_SHAPE_SEED = 20_000


@dataclass
class ShapeCheck:
    """The other shape verified, or why none is."""

    batch: int | None = None
    inputs: tuple | None = None
    said: str = ""  # "batch 3 (the example's 2)" or "not checked: <why>"

    def details(self, passed: bool | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {"batch": self.batch, "checked": self.batch is not None, "said": self.said}
        if passed is not None:
            doc["passed"] = passed
        return doc


@dataclass
class InputPlan:
    rotation: list[tuple]  # the timed calls rotate through these (the example inputs first)
    held_out: list[tuple]  # verification's inputs
    shape: ShapeCheck
    held_out_said: str  # what the held-out inputs are, for the report's conditions
    notes: list[str] = field(default_factory=list)  # derived sets left out, and why
    exploring: list[tuple[str, tuple]] = field(default_factory=list)  # (name, inputs), each judged alone
    exploring_said: dict[str, str] = field(default_factory=dict)  # every exploring set: checked, or why not
    behaviour: Behaviour | None = None

    def checks(self) -> dict[str, Any]:
        """What verification runs on, for the report."""
        return {"held_out": self.held_out_said, "exploring": self.exploring_said, "other_shape": self.shape.said,
                "behaviour": self.behaviour.summary() if self.behaviour else "not probed"}


def plan_inputs(workload: Workload, rotation_sets: int, shape_check: bool = True) -> InputPlan:
    """Rotation sets, held-out sets, exploring sets and the other shape for `workload` (runs the
    original model on derived sets and the other shape to see that it takes them); planned once
    per workload and settings in a process (a search's every candidate run asks again)."""
    plans = workload.__dict__.setdefault("_input_plans", {})
    key = (rotation_sets, shape_check)
    if key not in plans:
        plans[key] = _plan(workload, rotation_sets, shape_check)
    return dataclasses.replace(plans[key])  # a run may replace its shape check: not the cached plan's


def _plan(workload: Workload, rotation_sets: int, shape_check: bool) -> InputPlan:
    behaviour = ensure_behaviour(workload)
    if workload.decoder is not None:
        decoder_said = "not checked: decoders are verified on teacher-forced logits at the timed batch"
        return InputPlan([workload.example_inputs], [], ShapeCheck(said=decoder_said), "teacher-forced logits", behaviour=behaviour)
    judge = _Acceptance(workload)
    rotation = [workload.example_inputs] + judge.keep([workload.inputs(seed) for seed in range(1, rotation_sets)], "rotation")
    held_out, said = _held_out(workload, judge)
    shape = _other_shape(workload, judge) if shape_check else ShapeCheck(said="not checked: turned off for this run")
    exploring, exploring_said = _exploring(workload, judge) if shape_check else ([], {"all": "not checked: turned off for this run"})
    return InputPlan(rotation, held_out, shape, said, judge.notes, exploring, exploring_said, behaviour)


def baseline_problem(workload: Workload, plan: InputPlan | None = None) -> str | None:
    """Why no candidate can be verified against the original model (its output on the held-out
    inputs has NaN/Inf), or None; one line, for ending a run before any candidate is built."""
    unverifiable = ensure_behaviour(workload).unverifiable()
    if unverifiable or workload.decoder is not None:
        return unverifiable
    plan = plan or plan_inputs(workload, 1, shape_check=False)
    with torch.no_grad():
        return check_reference([workload.model(*fresh_copy(inputs)) for inputs in plan.held_out])


def _held_out(workload: Workload, judge: "_Acceptance") -> tuple[list[tuple], str]:
    if workload.check_inputs is not None:
        sets = _in_batches(workload.check_inputs, workload.batch)
        return sets, f"{workload.hints.get('check_inputs_from', 'the workload' + chr(39) + 's check data')} ({len(sets)} batches)"
    seeds = range(HELD_OUT_SEED, HELD_OUT_SEED + HELD_OUT_SETS)
    sets = judge.keep([workload.inputs(seed) for seed in seeds], "held-out")
    source = "from the workload's input generator" if workload.make_inputs else "derived from the example inputs"
    if sets:
        return sets, f"{len(sets)} sets {source} (seeds {seeds[0]}-{seeds[-1]}), not the inputs candidates were built with"
    return [workload.example_inputs], "the example inputs only (the original model rejects inputs derived from them)"


def _exploring(workload: Workload, judge: "_Acceptance") -> tuple[list[tuple[str, tuple]], dict[str, str]]:
    kept, said = [], {}
    for name, inputs in exploring_sets(workload):
        refusal = judge.refusal(inputs, all_zero=True)
        if refusal is None:
            kept.append((name, inputs))
            said[name] = "checked" + (f" ({describe_wide(workload)})" if name == "wide" else "")
        else:
            said[name] = f"left out: the original model does not take it ({refusal})"
    if not said:
        said["all"] = "none: the model takes no floating inputs or token ids"
    return kept, said


def _in_batches(data: tuple, batch: int) -> list[tuple]:
    """Check data in chunks of the benchmark batch (no recompilation for new shapes)."""
    n = data[0].shape[0]
    return [tuple(t[i : i + batch] for t in data) for i in range(0, n - n % batch or n, batch)]


def _other_shape(workload: Workload, judge: "_Acceptance") -> ShapeCheck:
    batch = workload.batch
    if not any(_batched(t, batch) for t in torch.utils._pytree.tree_leaves(workload.example_inputs)):
        return ShapeCheck(said=f"not checked: no input has the batch size ({batch}) as its first dimension")
    refusals = []
    seq = sequence_length(workload.example_inputs)
    tries = [(batch + 1, (seq, seq - seq // 4))] if seq else []
    tries += [(other, None) for other in dict.fromkeys((batch + 1, 2 * batch))]
    for other, sequence in tries:
        inputs = like_inputs(workload.example_inputs, OTHER_SHAPE_SEED, batch=(batch, other), seq=sequence)
        refusal = judge.refusal(inputs)
        what = f"batch {other}" + (f" x sequence {sequence[1]}" if sequence else "")
        if refusal is None:
            example = f"{batch}" + (f" x {sequence[0]}" if sequence else "")
            return ShapeCheck(other, inputs, f"{what} (the example's is {example})")
        if sequence is None:
            refusals.append(f"{what}: {refusal}")
    return ShapeCheck(said=f"not checked: the original model does not take another batch size ({'; '.join(refusals)})")


def _batched(leaf: Any, batch: int) -> bool:
    return isinstance(leaf, torch.Tensor) and leaf.dim() > 0 and leaf.shape[0] == batch


class _Acceptance:
    """Whether the original model takes an input set: it runs, and its output is finite unless
    its output on the example inputs is not."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.notes: list[str] = []
        self._example_finite: bool | None = None

    def refusal(self, inputs: tuple, all_zero: bool = False) -> str | None:
        """Why the model does not take `inputs`, or None; `all_zero`: an output of zeros only is
        refused too (nothing to compare a relative error with)."""
        try:
            with torch.no_grad():
                output = self.workload.model(*fresh_copy(inputs))
                problem = check_reference(output)
        except Exception as exc:  # noqa: BLE001 - any error: the model does not take these inputs
            return first_line(exc)
        if problem and self.example_finite:
            return "its output has NaN/Inf values there, not on the example inputs"
        floating = [t for t in tensor_leaves(output) if t.is_floating_point()]
        if all_zero and floating and not any(bool(t.any()) for t in floating):
            return "its output is all zeros there"
        return None

    @property
    def example_finite(self) -> bool:
        if self._example_finite is None:
            with torch.no_grad():
                self._example_finite = check_reference(self.workload.model(*fresh_copy(self.workload.example_inputs))) is None
        return self._example_finite

    def keep(self, sets: list[tuple], role: str) -> list[tuple]:
        """Sets the workload generates are trusted; derived ones are kept where the model takes them."""
        if self.workload.make_inputs is not None:
            return sets
        kept = []
        for inputs in sets:
            refusal = self.refusal(inputs)
            if refusal is None:
                kept.append(inputs)
            elif not any(note.startswith(f"{role} inputs") for note in self.notes):
                self.notes.append(f"{role} inputs: a set derived from the example inputs was left out (the original model does not take it: {refusal})")
        return kept

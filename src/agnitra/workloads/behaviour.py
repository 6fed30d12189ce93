"""What the original model does besides computing its output, found by running it.

One probe of the original model on copies of its example inputs, before anything is measured:

- inputs it changes in place (`x.mul_(2)` in `forward`): every call then gets its own copies, and
  a candidate must leave them as the original does;
- tensor values read into Python (`bool(tensor)`, `.item()`, `int(tensor)`, `torch.cond`): the
  model's path may depend on the values of its inputs; the report names where;
- buffers a call changes (state kept from call to call);
- two calls on the same inputs that answer differently (randomness in `forward`, an output that
  depends on such state): nothing can be verified against that model.

Decoders (the static-KV-cache runtime writes its caches on every step) are not probed.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from agnitra.errors import NotApplicable, first_line
from agnitra.pytree import fresh_copy

# functions through which a tensor's values become Python values, as the report names them
VALUE_READS = {"__bool__": "bool(tensor)", "item": ".item()", "tolist": ".tolist()", "__int__": "int(tensor)",
               "__float__": "float(tensor)", "__index__": "a tensor used as an index", "cond": "torch.cond"}
LISTED = 5  # places listed per finding
# two calls on the same inputs agree when their floating outputs are this close (relative L2):
# GPU reductions may add in another order from call to call
REPEAT_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
REPEAT_TOLERANCE_DEFAULT = 1e-4
_LIBRARY_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)  # torch's and Agnitra's own code
_MODEL_DIRS = (os.path.join(os.path.dirname(os.path.dirname(__file__)), "testing") + os.sep,)  # Agnitra's models under test (the adversarial zoo)


@dataclass
class Behaviour:
    """The probe's findings; `checked` False (with `said`) where the model was not probed."""

    checked: bool = True
    mutated_inputs: list[str] = field(default_factory=list)  # "input 0" ...
    value_reads: list[str] = field(default_factory=list)  # "bool(tensor) at model.py:12"
    changed_buffers: list[str] = field(default_factory=list)
    unrepeatable: str = ""  # how two calls on the same inputs differed; "" when they agree
    said: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def mutates_inputs(self) -> bool:
        return bool(self.mutated_inputs)

    def unverifiable(self) -> str | None:
        """Why no candidate can be verified against this model, or None."""
        if not self.unrepeatable:
            return None
        state = f"; it updates its buffer(s) {', '.join(self.changed_buffers)} on every call" if self.changed_buffers else " (randomness in forward?)"
        return f"the original model answers differently on two calls with the same inputs ({self.unrepeatable}){state}: nothing can be verified against it"

    def frozen_by(self, runtime: str) -> str | None:
        """Why a runtime that replays one recorded call (an ONNX export, a CUDA graph) would answer
        otherwise than this model, or None: it cannot change the caller's inputs or keep state."""
        if self.mutated_inputs:
            return f"the model changes its inputs in place ({', '.join(self.mutated_inputs)}); {runtime} would leave them unchanged"
        if self.changed_buffers:
            return f"the model updates buffers in forward ({', '.join(self.changed_buffers)}); {runtime} keeps no state from call to call"
        return None

    def summary(self) -> str:
        """One line for the report's checks."""
        if not self.checked:
            return f"not probed: {self.said}"
        found = []
        if self.mutated_inputs:
            found.append(f"changes its inputs in place ({', '.join(self.mutated_inputs)}): every call gets its own copies")
        if self.value_reads:
            found.append(f"reads tensor values into Python ({'; '.join(self.value_reads)}): its path may depend on its inputs")
        if self.changed_buffers:
            found.append(f"updates buffers in forward ({', '.join(self.changed_buffers)})")
        if self.unrepeatable:
            found.append(f"answers differently on two calls with the same inputs ({self.unrepeatable})")
        if self.said:
            found.append(self.said)
        return "; ".join(found) or "none found (no input changed in place, no tensor value read into Python, same answer on two calls)"


class _ValueReads(TorchFunctionMode):
    """Records where tensor values are read into Python during one call (user code's file:line)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, None] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if torch.compiler.is_compiling():  # inside torch.cond's own TorchDynamo trace: nothing to walk there
            return func(*args, **(kwargs or {}))
        if name in VALUE_READS and len(self.found) < LISTED:
            self.found.setdefault(f"{VALUE_READS[name]} at {_user_frame()}", None)
        return func(*args, **(kwargs or {}))


def _user_frame() -> str:
    """The innermost stack frame outside torch and Agnitra: where the model's code read the value."""
    for frame in reversed(traceback.extract_stack(limit=40)):
        if frame.filename.startswith("<"):  # code generated at run time (an FX graph): not the model's own
            continue
        if not frame.filename.startswith(_LIBRARY_DIRS) or frame.filename.startswith(_MODEL_DIRS):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "inside torch"


def ensure_behaviour(workload) -> Behaviour:
    """The workload's probe findings, probing once where nobody has."""
    if getattr(workload, "behaviour", None) is None:
        workload.behaviour = probe(workload)
    return workload.behaviour


def probe(workload) -> Behaviour:
    if workload.decoder is not None:
        return Behaviour(checked=False, said="decoders write their KV caches on every step; verified on teacher-forced logits")
    model, example = workload.model, workload.example_inputs
    buffers = {name: buffer.detach().clone() for name, buffer in model.named_buffers()}
    given = fresh_copy(example)
    reads, said = _ValueReads(), ""
    try:
        with torch.no_grad():
            try:
                with reads:
                    first = _kept(model(*given))
            except Exception as exc:  # noqa: BLE001 - a model the mode upsets: probed without it
                reads.found = {}
                said = f"tensor values read into Python: not checked (the model fails under a torch function mode: {first_line(exc)})"
                given = fresh_copy(example)
                first = _kept(model(*given))
            changed = [name for name, buffer in model.named_buffers() if name in buffers and not same_values(buffer, buffers[name])]
            second = _kept(model(*fresh_copy(example)))
    except Exception as exc:  # noqa: BLE001 - the smoke test has run: a second failure is said, not raised
        return Behaviour(checked=False, said=f"the probe call failed: {first_line(exc)}")
    mutated = [f"input {path}" for path, (before, after) in paired_tensors(example, given) if not same_values(before, after)]
    return Behaviour(mutated_inputs=mutated, value_reads=list(reads.found), changed_buffers=changed[:LISTED], unrepeatable=_difference(first, second), said=said)


def _kept(output: Any) -> Any:
    """An output copied off the model's tensors (an output may alias an input or a buffer)."""
    return torch.utils._pytree.tree_map(lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf, output)


def paired_tensors(a: Any, b: Any) -> list[tuple[str, tuple[torch.Tensor, torch.Tensor]]]:
    flat_a, _ = torch.utils._pytree.tree_flatten(a)
    flat_b, _ = torch.utils._pytree.tree_flatten(b)
    return [(str(i), (x, y)) for i, (x, y) in enumerate(zip(flat_a, flat_b)) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)]


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def _difference(first: Any, second: Any) -> str:
    """How two outputs of the same inputs differ ("" when they agree within float reordering)."""
    flat_a, spec_a = torch.utils._pytree.tree_flatten(first)
    flat_b, spec_b = torch.utils._pytree.tree_flatten(second)
    if spec_a != spec_b:
        return "the output's structure differs"
    for i, (a, b) in enumerate(zip(flat_a, flat_b)):
        if not isinstance(a, torch.Tensor):
            if a != b and not (a != a and b != b):  # NaN numbers agree
                return f"output leaf {i}: {a!r} then {b!r}"
            continue
        if a.shape != b.shape:
            return f"output leaf {i}: shape {tuple(a.shape)} then {tuple(b.shape)}"
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return f"output leaf {i}: integer values differ"
            continue
        if not torch.equal(a.isnan(), b.isnan()) or not torch.equal(a.isinf(), b.isinf()):
            return f"output leaf {i}: NaN/Inf in different places"
        finite = a.isfinite()
        x, y = a[finite].double(), b[finite].double()
        error = ((x - y).norm() / x.norm().clamp_min(1e-30)).item() if x.numel() else 0.0
        if error > REPEAT_TOLERANCE.get(a.dtype, REPEAT_TOLERANCE_DEFAULT):
            return f"output leaf {i}: relative difference {error:.3g}"
    return ""


def check_not_frozen(workload, runtime: str) -> None:
    """Raise NotApplicable where `runtime` (one recorded call replayed) would answer otherwise than the model."""
    reason = ensure_behaviour(workload).frozen_by(runtime)
    if reason:
        raise NotApplicable(reason)

"""A verification call: the variant runs on its own copies of the inputs, and what it did to them
is kept beside its output.

A candidate is judged on what the original model returns for the same untouched inputs, and on
leaving its inputs as the original does: one that changes them where the original does not (or
changes them otherwise) fails verification, whatever its output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

from agnitra.pytree import fresh_copy
from agnitra.results import Correctness
from agnitra.verify import compare_sets
from agnitra.workloads.behaviour import paired_tensors, same_values


@dataclass
class CheckedCall:
    output: Any  # the call's output, copied to the CPU (a CUDA graph's outputs are overwritten by the next replay)
    changed: list[str] = field(default_factory=list)  # inputs the call changed in place ("input 0")
    inputs_after: Any = None  # the inputs as the call left them, on the CPU, where it changed any


def on_cpu(tree: Any) -> Any:
    return tree_map(lambda leaf: leaf.detach().to("cpu", copy=True) if isinstance(leaf, torch.Tensor) else leaf, tree)


def checked_call(call: Callable[..., Any], inputs: tuple) -> CheckedCall:
    given = fresh_copy(inputs)
    output = on_cpu(call(*given))
    changed = [f"input {path}" for path, (before, after) in paired_tensors(inputs, given) if not same_values(before, after)]
    return CheckedCall(output, changed, on_cpu(given) if changed else None)


def input_changes_problem(reference: list[CheckedCall], candidate: list[CheckedCall]) -> str | None:
    """Why the candidate's effect on its inputs differs from the original's, or None."""
    for ref, cand in zip(reference, candidate):
        if ref.changed != cand.changed:
            theirs = ", ".join(ref.changed) or "none"
            return f"changes its inputs in place ({', '.join(cand.changed) or 'none'}) where the original model changes {theirs}"
    pairs = [(ref.inputs_after, cand.inputs_after) for ref, cand in zip(reference, candidate) if ref.changed]
    if not pairs:
        return None
    check: Correctness = compare_sets("rel_error", pairs)
    if not check.passed:
        return f"leaves its inputs otherwise than the original model does ({check.details.get('error', 'they differ')})"
    return None

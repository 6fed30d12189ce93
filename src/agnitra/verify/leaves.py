"""Outputs of any structure, walked leaf by leaf beside a reference.

A model may return a tensor, tuples, lists, dicts, dataclasses, transformers ModelOutputs,
numbers, strings or None, nested. `paired_leaves` walks a candidate's output and the reference's
together and gives each comparable leaf (tensors and numbers) with its path, e.g.
`output['logits'][1]`; a difference of structure (keys, lengths, kinds, None against a value,
shapes) raises `StructureMismatch` naming the path. Numbers become 0-d tensors (floats in
float64), so every comparable leaf is a tensor from there on.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


class StructureMismatch(ValueError):
    """The candidate's output is shaped unlike the reference's; the message names the leaf."""


class _NotProduced:
    """A leaf a runtime cannot return (ONNX Runtime returns tensors only)."""

    def __repr__(self) -> str:
        return "nothing (the runtime returns tensors only)"


NOT_PRODUCED = _NotProduced()


@dataclass
class LeafPair:
    path: str
    reference: torch.Tensor
    candidate: torch.Tensor
    number: bool = False  # a Python number, as a 0-d tensor


def kind(value: Any) -> str:
    """What a node is, for comparing structures: tensor, bool, int, float, str, none, mapping,
    sequence, object (a dataclass) or the type's name."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, numbers.Integral):
        return "int"
    if isinstance(value, numbers.Real):
        return "float"
    if value is None:
        return "none"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Mapping):  # dicts and transformers ModelOutputs (their non-None fields)
        return "mapping"
    if isinstance(value, (tuple, list)):
        return "sequence"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "object"
    return type(value).__name__


NUMBER_KINDS = {"bool": torch.bool, "int": torch.int64, "float": torch.float64}


def describe(value: Any) -> str:
    k = kind(value)
    if k == "tensor":
        return f"a tensor of shape {tuple(value.shape)}"
    if k in ("none", "str") or value is NOT_PRODUCED:
        return repr(value)
    if k in NUMBER_KINDS:
        return f"{'an' if k == 'int' else 'a'} {k} ({value})"
    if k == "sequence":
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _children(value: Any, k: str) -> dict[str, Any]:
    if k == "mapping":
        return {f"[{key!r}]": value[key] for key in value.keys()}
    if k == "sequence":
        return {f"[{i}]": item for i, item in enumerate(value)}
    return {f".{f.name}": getattr(value, f.name) for f in dataclasses.fields(value)}


def paired_leaves(reference: Any, candidate: Any, path: str = "output") -> list[LeafPair]:
    """Every tensor and number of `reference` with the candidate's at the same path."""
    ref_kind, cand_kind = kind(reference), kind(candidate)
    if ref_kind != cand_kind:
        raise StructureMismatch(f"{path}: {describe(candidate)} vs reference {describe(reference)}")
    if ref_kind == "tensor":
        if reference.shape != candidate.shape:
            raise StructureMismatch(f"{path}: shape {tuple(candidate.shape)} vs reference {tuple(reference.shape)}")
        if is_exact(reference) != is_exact(candidate):
            raise StructureMismatch(f"{path}: dtype {_dtype(candidate)} vs reference {_dtype(reference)}")
        return [LeafPair(path, reference, candidate)]
    if ref_kind in NUMBER_KINDS:
        dtype = NUMBER_KINDS[ref_kind]
        return [LeafPair(path, torch.tensor(_plain(reference), dtype=dtype), torch.tensor(_plain(candidate), dtype=dtype), number=True)]
    if ref_kind in ("mapping", "sequence", "object"):
        return _paired_children(reference, candidate, ref_kind, path)
    if ref_kind == "none":
        return []
    if reference != candidate:  # strings and other values: equal or not
        raise StructureMismatch(f"{path}: {describe(candidate)} vs reference {describe(reference)}")
    return []


def _paired_children(reference: Any, candidate: Any, k: str, path: str) -> list[LeafPair]:
    ref_children, cand_children = _children(reference, k), _children(candidate, k)
    if k == "sequence" and len(ref_children) != len(cand_children):
        raise StructureMismatch(f"{path}: {len(cand_children)} items vs reference {len(ref_children)}")
    if ref_children.keys() != cand_children.keys():
        missing = [key for key in ref_children if key not in cand_children]
        extra = [key for key in cand_children if key not in ref_children]
        said = "; ".join(part for part in (f"missing {', '.join(missing)}" if missing else "", f"extra {', '.join(extra)}" if extra else "") if part)
        raise StructureMismatch(f"{path}: keys differ from the reference's ({said})")
    return [pair for key, ref in ref_children.items() for pair in paired_leaves(ref, cand_children[key], path + key)]


def is_exact(tensor: torch.Tensor) -> bool:
    """Integer and bool values are compared exactly, floating ones within a tolerance."""
    return not (tensor.is_floating_point() or tensor.is_complex())


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).replace("torch.", "")


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def comparable_leaves(output: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) of every tensor and number of one output (numbers as 0-d tensors)."""
    return [(pair.path, pair.reference) for pair in paired_leaves(output, output, path)]


def nonfinite_count(tensor: torch.Tensor) -> int:
    return int((~torch.isfinite(tensor)).sum()) if tensor.is_floating_point() or tensor.is_complex() else 0


def renest(reference: Any, flat: Any) -> Any:
    """A flat tuple of tensors (what an ONNX Runtime session returns: the model's tensors in
    pytree order) put back into the reference's structure, so it is compared leaf by leaf. The
    reference's other leaves (numbers, strings) are not produced by such a runtime; its Nones
    are structure, kept. Anything else is returned as it is."""
    if not (isinstance(flat, tuple) and all(isinstance(t, torch.Tensor) for t in flat)):
        return flat
    leaves, spec = tree_flatten(reference)
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    if len(slots) != len(flat):
        return flat
    rebuilt = [leaf if leaf is None else NOT_PRODUCED for leaf in leaves]
    for slot, tensor in zip(slots, flat):
        rebuilt[slot] = tensor
    return tree_unflatten(rebuilt, spec)

"""The user's own check inputs (`--check-inputs FILE`, `check_inputs=`): real data that verification
runs every candidate on, in place of the held-out sets derived from the example inputs.

A file is a tensor, or a tuple or list of tensors, one per model input, each with the example
input's dimensions after the first (rows: any number, checked in batches of the timed batch size):
`torch.save((ids, mask), "check.pt")` or `numpy.savez("check.npz", ids, mask)`. It is read without
running code: `torch.load(weights_only=True)`, `numpy.load(allow_pickle=False)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from agnitra.errors import UserError, first_line
from agnitra.workloads.base import Workload

SUFFIXES = (".pt", ".pth", ".npz")
FIX = "save a tensor or a tuple of tensors, one per model input (torch.save((x,), 'check.pt') or numpy.savez)"


def attach_check_inputs(workload: Workload, given: Any) -> None:
    """Set `workload.check_inputs` from a file path or tensors; one-line errors for what does not fit."""
    if given is None:
        return
    if workload.decoder is not None:
        raise UserError("--check-inputs does not apply to a decoder: it is verified on teacher-forced logits (--max-ppl-increase with text, or --min-sqnr-db)")
    source = str(given) if isinstance(given, (str, Path)) else "check_inputs given in Python"
    tensors = read_check_inputs(Path(given)) if isinstance(given, (str, Path)) else _as_tuple(given, source)
    workload.check_inputs = _fitted(tensors, workload, source)
    workload.hints["check_inputs_from"] = source


def read_check_inputs(path: Path) -> tuple[torch.Tensor, ...]:
    """A check-inputs file read as tensors, without running code and before any model is known
    (the service checks an upload with it); whether they fit a model is `attach_check_inputs`'s."""
    return _as_tuple(_read(path), str(path))


def _read(path: Path) -> Any:
    if not path.is_file():
        raise UserError(f"--check-inputs {path}: no such file; {FIX}")
    if path.suffix.lower() not in SUFFIXES:
        raise UserError(f"--check-inputs {path}: unsupported file type '{path.suffix}' (use {', '.join(SUFFIXES)}); {FIX}")
    try:
        if path.suffix.lower() == ".npz":
            import numpy as np

            with np.load(path, allow_pickle=False) as archive:
                return tuple(torch.from_numpy(archive[name].copy()) for name in archive.files)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged or pickled file: said in one line
        raise UserError(f"--check-inputs {path} cannot be read as tensors ({first_line(exc)}); {FIX}") from exc


def _as_tuple(data: Any, source: str) -> tuple[torch.Tensor, ...]:
    if isinstance(data, torch.Tensor):
        return (data,)
    if isinstance(data, (list, tuple)) and data and all(isinstance(t, torch.Tensor) for t in data):
        return tuple(data)
    raise UserError(f"{source} holds {type(data).__name__}, not tensors; {FIX}")


def _fitted(tensors: tuple[torch.Tensor, ...], workload: Workload, source: str) -> tuple[torch.Tensor, ...]:
    example = workload.example_inputs
    if len(tensors) != len(example) or not all(isinstance(t, torch.Tensor) for t in example):
        raise UserError(f"{source} holds {len(tensors)} tensor(s) but the model takes {len(example)} input(s); {FIX}")
    rows = {t.shape[0] if t.dim() else 0 for t in tensors}
    if len(rows) != 1 or 0 in rows:
        raise UserError(f"{source}: every tensor needs the same number of rows (dim 0) and at least one; got {sorted(rows)}")
    fitted = []
    for i, (given, like) in enumerate(zip(tensors, example)):
        if given.dim() != like.dim() or (like.dim() > 1 and tuple(given.shape[1:]) != tuple(like.shape[1:])):
            raise UserError(f"{source}: input {i} has shape {tuple(given.shape)}; the model's example input {i} is {tuple(like.shape)} (rows may differ, not the other dimensions)")
        if given.is_floating_point() != like.is_floating_point():
            kind = "floating-point" if like.is_floating_point() else "integer"
            raise UserError(f"{source}: input {i} is {str(given.dtype).replace('torch.', '')}; the model takes {kind} values there ({str(like.dtype).replace('torch.', '')})")
        fitted.append(given.to(device=like.device, dtype=like.dtype))
    return tuple(fitted)

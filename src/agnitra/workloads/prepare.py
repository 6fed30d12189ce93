"""Workload preparation: whatever the user names or hands over, as a runnable Workload on a device.

The one entry every verb goes through (profile, inspect, bench, optimize, load): a zoo name, a
model file or a live `nn.Module` with example inputs, resolved onto the device, cast when asked
and run once on its example inputs so that shape and dtype problems surface as one-line errors.

A model the user hands over (an `nn.Module` or a `Workload`) is never changed: the verbs work on
an independent copy (`model_copy`: its own modules and Parameter objects, buffers cloned), moved,
cast and put in eval mode there, so the user's parameters, dtype, device, train/eval flags,
`requires_grad` and hooks are as they were. Model files are read without running code they carry
unless `allow_pickle` says the user trusts them (`safe_load`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from agnitra.config import load_settings
from agnitra.device import resolve_device
from agnitra.errors import UserError
from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.behaviour import ensure_behaviour
from agnitra.workloads.check_inputs import attach_check_inputs
from agnitra.workloads.loaders import inference_mode, load_workload, on_device, refuse_meta, smoke_test, with_task
from agnitra.workloads.model_copy import independent_copy
from agnitra.workloads.registry import BuildOptions

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


def parse_dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    if name.lower() not in DTYPES:
        raise UserError(f"unknown dtype '{name}'; use one of: fp32, fp16, bf16")
    return DTYPES[name.lower()]


def prepare_workload(
    model: str | Workload | torch.nn.Module,
    example_inputs: Sequence | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: str | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
    tokens: int | None = None,
    input_shapes: list[str] | None = None,
    task: str | None = None,
    size: str = "full",
    allow_pickle: bool = False,
    check_inputs: Any = None,
) -> tuple[Workload, torch.device]:
    """A runnable Workload on the resolved device, checked once on its example inputs;
    `check_inputs` (a file or tensors: workloads.check_inputs) replaces its held-out data."""
    dev = device if isinstance(device, torch.device) else resolve_device(device or load_settings().device)
    if isinstance(model, (Workload, torch.nn.Module)):
        _refuse_file_options(model, batch=batch, seq_len=seq_len, tokens=tokens, input_shapes=input_shapes, size=None if size == "full" else size, allow_pickle=allow_pickle or None)
        workload = _from_python(model, example_inputs, dev, task)
    else:
        options = BuildOptions(device=dev, dtype=parse_dtype(dtype), batch=batch, seq_len=seq_len, tokens=tokens, size=size)
        workload = load_workload(str(model), options, input_shapes=input_shapes, task=task, allow_pickle=allow_pickle)
    if dtype and not (isinstance(model, str) and model.startswith(("zoo:", "gen:"))):
        _cast(workload, parse_dtype(dtype))
    smoke_test(workload)
    attach_check_inputs(workload, check_inputs)
    ensure_behaviour(workload)
    return workload, dev


def _refuse_file_options(model: Workload | torch.nn.Module, **given) -> None:
    """Size and file options do nothing for a model handed over in Python: refused, not ignored."""
    for name, value in given.items():
        if value is not None:
            what = "a Workload" if isinstance(model, Workload) else "a model passed with example_inputs"
            raise UserError(f"{name}= does not apply to {what}: its example inputs fix the shapes and nothing is read from a file; drop {name}=")


def _from_python(model: Workload | torch.nn.Module, example_inputs: Sequence | None, dev: torch.device, task: str | None) -> Workload:
    """The user's module or Workload as a Workload over an independent copy of the module, on `dev`, in eval mode."""
    if isinstance(model, Workload):
        workload = dataclasses.replace(model, model=_inference_copy(model.model, dev))
        workload.example_inputs = on_device(workload.example_inputs, dev)
        return with_task(workload, task)
    if example_inputs is None:
        raise UserError("a model needs example_inputs (a tuple of tensors it accepts)")
    inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    workload = Workload(name=type(model).__name__, model=_inference_copy(model, dev), example_inputs=on_device(inputs, dev), task=TaskKind(task or "generic"), source="python")
    workload.batch = next((t.shape[0] for t in workload.example_inputs if isinstance(t, torch.Tensor) and t.dim() > 0), 1)
    return workload


def _inference_copy(model: torch.nn.Module, dev: torch.device) -> torch.nn.Module:
    """The user's module copied (the original keeps its mode, dtype, device and tensors), on `dev`, in eval mode."""
    refuse_meta(model)
    return inference_mode(independent_copy(model).to(dev))


def _cast(workload: Workload, dtype: torch.dtype) -> None:
    """--dtype for a user model: parameters and floating-point example inputs."""
    from agnitra.ort.session import OrtModule

    if isinstance(workload.model, OrtModule):
        raise UserError("--dtype does not apply to an ONNX model: its precision is fixed in the file")
    workload.model = workload.model.to(dtype)
    workload.example_inputs = tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in workload.example_inputs)
    if workload.make_inputs is not None:
        make = workload.make_inputs
        workload.make_inputs = lambda seed: tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in make(seed))

"""A layout mode's model as it is served: the dense copy the pipeline made (pruned or rounded
values in ordinary tensors) converted to the weight format whose kernels compute with those
values (2:4 semi-structured sparse, int4 or int8 weight-only), so that its latency, memory and
energy are the format's and not the dense model's. Where no kernel serves the steps, the dense
copy is measured and the reason is said."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agnitra.errors import AgnitraError, first_line
from agnitra.transforms.base import TransformContext, get_transform
from agnitra.transforms.permutation.gather import as_wrapped
from agnitra.transforms.permutation.steps import StateStep
from agnitra.workloads.base import Workload


@dataclass(frozen=True)
class Kernel:
    transform: str
    params: dict

    @property
    def text(self) -> str:
        said = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.transform}({said})" if said else self.transform


def kernel_for(step: StateStep) -> Kernel | None:
    """The weight-format transform whose kernels compute with what the step leaves."""
    if step.kind == "sparsity":
        return Kernel("sparsity-2of4", {})
    if step.kind == "quant" and step.bits == 4:
        return Kernel("int4-weight-only", {"group_size": step.group})
    if step.kind == "quant" and step.bits == 8 and not step.group:
        return Kernel("int8-weight-only", {})
    return None  # blocks: no block-sparse matmul kernel here


def served_kernel(steps: list[StateStep]) -> tuple[Kernel | None, str]:
    """The one kernel that serves all the steps, or None and why (one weight format a layer:
    2:4 and int4 together have no kernel)."""
    if not steps:  # KV-cache steps only: their compressed cache serves them, the weights stay as they are
        return None, ""
    kernels = [kernel_for(s) for s in steps]
    missing = [s.text for s, k in zip(steps, kernels) if k is None]
    if missing:
        return None, f"no kernel runs {', '.join(missing)}: measured as dense weights"
    if len(kernels) > 1:
        return None, f"no kernel runs {' and '.join(s.text for s in steps)} together: measured as dense weights"
    return kernels[0], ""


def serve(model: nn.Module, workload: Workload, device: torch.device, kernel: Kernel | None) -> tuple[nn.Module, str]:
    """`model` (a dense copy, changed in place) in the kernel's format on `device`, or as it is with
    the reason the kernel does not apply here."""
    if kernel is None:
        return model, ""
    as_wrapped(model)  # a layer's own input order as a gather in front of a plain Linear the kernel's transform converts
    transform = get_transform(kernel.transform)
    params = type(transform.default_params())(**{**transform.default_params().__dict__, **kernel.params})
    ctx = TransformContext(workload, device)
    model = model.to(device)
    try:
        transform.check(ctx, params)
        return transform.apply(model, ctx, params), f"served by {kernel.text}"
    except AgnitraError as exc:
        return model, f"{kernel.text} does not apply here ({first_line(exc)}): measured as dense weights"

"""Benchmark variants: ways to run one workload (eager, torch.compile modes, ONNX Runtime, ...).

A variant prepares callables from a workload and raises `NotApplicable` with the reason when it
cannot run here; the harness records that reason instead of silently dropping the variant.
A new variant is one new file in this package and one `@register_variant`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable

import torch

from agnitra.errors import UserError
from agnitra.workloads.base import Workload, tensor_leaves


@dataclass
class Prepared:
    """What the harness runs. Forward workloads use `call`; decoders generate with `model` and the
    step functions it carries (`models.generate.step_functions`)."""

    call: Callable[..., Any] | None = None  # call(*inputs) -> outputs
    model: Any = None  # decoders: the model generation runs on (None: the workload's own)
    outputs: Callable[[Any], list[torch.Tensor]] = tensor_leaves  # outputs -> comparable tensors
    notes: str = ""
    # set when the variant computes in another precision than the workload (e.g. "int8"): the
    # workload's roofline, built on its own dtype's ceiling, does not bound it
    arithmetic: str = ""
    # changes the numbers beyond float rounding (a weight format, a lower precision): judged on the
    # exploring inputs for an answer that differs, not for precision (verify.exploring_threshold)
    lossy: bool = False


class Variant(abc.ABC):
    name: str = ""
    description: str = ""

    @abc.abstractmethod
    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        """Build what runs; raise agnitra.errors.NotApplicable(reason) when it cannot here."""


VARIANTS: dict[str, Variant] = {}


def register_variant(variant: Variant) -> Variant:
    if variant.name in VARIANTS:
        raise ValueError(f"variant '{variant.name}' registered twice")
    VARIANTS[variant.name] = variant
    return variant


def get_variant(name: str) -> Variant:
    import agnitra.bench.variants  # noqa: F401  (registers the built-in variants)

    if name not in VARIANTS:
        raise UserError(f"unknown variant '{name}'; available: {', '.join(VARIANTS)}")
    return VARIANTS[name]


"""What every Agnitra kernel provides, so the autotuner, the tests and the benchmark treat all alike.

A kernel file has four parts (Triton's tutorial layout): the `@triton.jit` kernel, a host
wrapper (checks, allocation, grid) that takes an explicit `config`, a PyTorch reference, and a
`KernelSpec` registered here describing its configuration space, its inputs and its cost (for
GB/s and TFLOP/s). Triton is imported lazily by the kernel files: without it (or without a GPU and
without TRITON_INTERPRET=1) `triton_available()` says why, and callers fall back with that reason.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch

KERNELS: dict[str, "KernelSpec"] = {}


@dataclass(frozen=True)
class KernelSpec:
    name: str
    # all configurations to try for a problem: list of dicts (BLOCK_*, num_warps, num_stages, ...)
    configs: Callable[[tuple[int, ...], torch.dtype], list[dict[str, Any]]]
    default_config: Callable[[tuple[int, ...], torch.dtype], dict[str, Any]]
    launch: Callable[..., Any]  # launch(*inputs, config=dict) -> output
    reference: Callable[..., Any]  # reference(*inputs) -> output, PyTorch, any dtype incl. float64
    make_inputs: Callable[[tuple[int, ...], torch.dtype, torch.device, int], tuple]  # (shape, dtype, device, seed)
    flops: Callable[[tuple[int, ...]], float]
    bytes: Callable[[tuple[int, ...], torch.dtype], float]  # compulsory bytes read + written
    bucket: Callable[[tuple[int, ...]], str]  # shapes that share a tuned configuration
    dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
    # variants of a search finalist that only the device can judge (e.g. where a kernel lets the next one
    # in under PDL): refinements(config, device) -> configs, checked and timed head to head with the finalists
    refinements: Callable[[dict[str, Any], torch.device], list[dict[str, Any]]] | None = None


def register_kernel(spec: KernelSpec) -> KernelSpec:
    KERNELS[spec.name] = spec
    return spec


def get_kernel(name: str) -> KernelSpec:
    import agnitra.kernels.registry  # noqa: F401  (imports every kernel file)

    from agnitra.errors import UserError

    if name not in KERNELS:
        raise UserError(f"unknown kernel '{name}'; known: {', '.join(sorted(KERNELS))}")
    return KERNELS[name]


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_available(device: torch.device) -> tuple[bool, str]:
    """(usable, reason when not): Triton installed, and a CUDA device or the interpreter."""
    if importlib.util.find_spec("triton") is None:
        return False, "Triton is not installed (pip install triton, or the agnitra[gpu] extra)"
    if device.type == "cuda":
        return True, ""
    if interpreting():
        return True, ""
    return False, f"Triton kernels run on CUDA GPUs (or on the CPU under TRITON_INTERPRET=1 for tests); this run is on {device.type}"


def pow2_bucket(n: int) -> int:
    """The power of two at or above n (shape buckets for the tuning cache)."""
    return 1 << max(0, (n - 1).bit_length())

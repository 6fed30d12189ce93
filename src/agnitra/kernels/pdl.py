"""Programmatic dependent launch (PDL, Hopper and later): a kernel's programs start while the kernel
before it in the stream finishes.

A kernel launched with PDL (`launch_pdl`) must wait (`griddepcontrol.wait`, `_pdl_wait`) before it
reads anything an earlier kernel writes, and before it writes; what nobody writes during a model's
run (weights, scales, bias) it may read before, overlapping the previous kernel's tail. It lets
the next kernel in (`griddepcontrol.launch_dependents`, `_pdl_trigger`) never before its own
wait, so a kernel after it that does not always wait (Inductor's wait only where they read the
kernel just before them) still runs after everything before this one.

Device helpers (`_pdl_trigger`, `_pdl_wait`) are plain functions the kernels call: `jit_kernel`
(`kernels._triton`) compiles them with the kernel (the interpreter runs them as Python, where PDL is always off);
`pdl_wait` is `_pdl_wait` jitted, for kernels defined with @triton.jit.
Host: `pdl_supported(device)` (asked at every launch), `pdl_unavailable` / `device_without_pdl`
(the reason, for reports), `pdl_options(x, config)` (the launch arguments).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from agnitra.config import kernel_pdl_enabled
from agnitra.kernels._triton import device_helper, tl, triton


@device_helper
def _pdl_trigger(PDL: tl.constexpr, HERE: tl.constexpr):
    """Programmatic dependent launch (Hopper+), PDL = where this kernel lets the next one in the
    stream (launched with PDL) start its programs: 2 once past its wait, 3 after its main loop
    (0: PDL off; at its very start, measured in pdl-trigger-*.json, it is unsafe beside kernels
    that do not always wait, and gone).
    The next kernel's programs read their constants and first weights while this one runs and
    wait (`_pdl_wait`) before reading anything it writes."""
    if PDL == HERE:
        tl.extra.cuda.gdc_launch_dependents()


@device_helper
def _pdl_wait(PDL: tl.constexpr):
    """Under PDL, wait here until the previous kernel in the stream has finished and its writes are
    visible: every read of an activation, and every write, comes after; weights, scales and bias
    (written by nobody during the model's run) may be read before. At trigger point 2 ("wait") the
    next kernel is let in right after (`_pdl_trigger`)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        if PDL == 2:
            tl.extra.cuda.gdc_launch_dependents()


# `_pdl_wait` for kernels defined with @triton.jit (norms, gated activation); the GEMV kernels call the
# plain function, jitted with them by `jit_kernel` (so TRITON_INTERPRET may be set after import)
pdl_wait = triton.jit(_pdl_wait)


def device_without_pdl(device: torch.device) -> str | None:
    """Why `device` cannot launch kernels with PDL (None: it can): it takes a CUDA GPU of compute
    capability 9.0 or later. Said in reports, for Agnitra's kernels and Inductor's alike."""
    if device.type != "cuda":
        return f"it needs a CUDA GPU (this run is on {device.type})"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return f"it needs compute capability 9.0 or later (this GPU is {major}.{minor})"
    return None


def pdl_unavailable(device: torch.device) -> str | None:
    """Why Agnitra's kernels launch without PDL here (None: they launch with it)."""
    from agnitra.kernels.spec import interpreting

    if not kernel_pdl_enabled():
        return "turned off (AGNITRA_PDL=0)"
    if interpreting():
        return "Triton's interpreter runs no PTX"
    return device_without_pdl(device)


def pdl_supported(device: torch.device) -> bool:
    """`pdl_unavailable(device) is None`, asked at every launch: the capability looked up once a device."""
    from agnitra.kernels.spec import interpreting

    if device.type != "cuda" or interpreting() or not kernel_pdl_enabled():
        return False
    return _capability(device.index if device.index is not None else torch.cuda.current_device()) >= (9, 0)


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


# where a GEMV lets the next kernel in (`_pdl_trigger`): never before its own wait, so a kernel
# after it that does not wait (Inductor's wait only where they read the kernel just before) still
# runs after everything before this one. "loop" (the default): 0.1-2 us faster than none in a chain
# of the same GEMV at llama shapes (pdl-trigger-*.json); "wait" is better for some tuned
# configurations and worse for others, so the tuner tries it on its finalists (`pdl_trigger_refinements`)
PDL_TRIGGERS = {"wait": 2, "loop": 3}
DEFAULT_PDL_TRIGGER = "loop"


def pdl_options(x: torch.Tensor, cfg: dict[str, Any]) -> dict[str, Any]:
    """A kernel's launch under programmatic dependent launch where the device has it: the kernel is
    told (PDL: it waits before reading x, and lets the next kernel in at that point) and launched
    so (launch_pdl: its programs start while the previous kernel in the stream finishes). Config
    key PDL: False turns it off for a launch, or names the trigger point (`PDL_TRIGGERS`)."""
    where = cfg.get("PDL", True)
    if where is False or not pdl_supported(x.device):
        return {}
    where = DEFAULT_PDL_TRIGGER if where is True else where
    if where not in PDL_TRIGGERS:
        raise ValueError(f"config PDL must be True, False or one of {sorted(PDL_TRIGGERS)}, got {where!r}")
    return {"PDL": PDL_TRIGGERS[where], "launch_pdl": True}


def pdl_trigger_refinements(config: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    """A tuned kernel's variants at the other trigger point (`KernelSpec.refinements`): where the GPU
    launches with PDL and the configuration leaves the point to the default ("loop"), the same with
    "wait". Letting the next kernel in right after the wait gained up to 4% on multi-wave grids
    (the next kernel's programs take the slots ours free) and lost up to 13% on one-wave grids (they
    crowd ours) in a chain of the same int8 GEMV (ab-l2-prefetch-int8-*.json): the device decides."""
    if not pdl_supported(device) or config.get("PDL", True) is not True:
        return []
    return [{**config, "PDL": "wait"}]


def pdl_note(who: str, why: str | None, running: str) -> str:
    """The report's line on PDL for `who` (a transform): `running` where it is on, else why it is off."""
    return f"{who}: {running}" if why is None else f"{who}: programmatic dependent launch off: {why}"

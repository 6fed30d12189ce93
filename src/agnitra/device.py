"""Device selection: `--device cpu|cuda|auto`, else the settings (AGNITRA_DEVICE, agnitra.toml), else auto."""

from __future__ import annotations

import torch

from agnitra.errors import DeviceUnavailable, UserError

CHOICES = ("cpu", "cuda", "auto")


def resolve_device(requested: str | None = None) -> torch.device:
    """The torch.device to run on. Asking for CUDA where there is none is a user error."""
    from agnitra.config import load_settings

    choice = (requested or load_settings().device or "auto").strip().lower()
    base = choice.split(":")[0]
    if base not in CHOICES:
        raise UserError(f"unknown device '{choice}'; use one of: {', '.join(CHOICES)}")
    if base == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if base == "cuda" and not torch.cuda.is_available():
        build = "without CUDA" if torch.version.cuda is None else f"with CUDA {torch.version.cuda}, but no GPU is visible"
        raise DeviceUnavailable(
            f"CUDA was requested but is not available (torch {torch.__version__} built {build}); "
            "use --device cpu or --device auto"
        )
    return torch.device(choice)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_SPOILED: list[str] = []  # why this process's device state can no longer be trusted


def mark_spoiled(reason: str) -> None:
    """Say that this process's device state is damaged for whatever runs next in it (a failed
    CUDA-graph capture leaves CUDA's random-number generator in capture mode): a worker that sees
    it exits once its call has answered, and the next call gets a fresh one."""
    if reason not in _SPOILED:
        _SPOILED.append(reason)


def spoiled() -> str:
    """Why this process's device state is damaged ('' if it is not)."""
    return "; ".join(_SPOILED)


# errors after which a CUDA context stays unusable: every later call in the process fails the same way
STICKY_CUDA_ERRORS = (
    "illegal memory access", "device-side assert", "unspecified launch failure", "illegal instruction",
    "misaligned address", "an illegal address", "cudaErrorLaunchFailure", "CUDA error: unknown error",
)


def sticky_cuda_error(text: str) -> bool:
    """Whether an error's text is one that leaves the CUDA context unusable."""
    lowered = text.lower()
    return any(pattern.lower() in lowered for pattern in STICKY_CUDA_ERRORS)


def context_lost(device: torch.device, failures: list[str]) -> str:
    """Why this process's device state cannot be trusted after a call that failed with `failures`
    ('' if it can): a sticky CUDA error named in them, or a device that no longer synchronises."""
    sticky = next((text for text in failures if sticky_cuda_error(text)), "")
    if sticky:
        return f"a sticky device error: {sticky[:200]}"
    if device.type != "cuda" or not failures:
        return ""
    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
    except Exception as exc:  # noqa: BLE001 - whatever the driver says, the context is gone
        return f"the device no longer answers: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
    return ""

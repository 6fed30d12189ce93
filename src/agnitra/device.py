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

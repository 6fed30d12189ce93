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


# what torch and Python say when an allocation fails: CUDA's OutOfMemoryError, the CPU allocator's
# RuntimeError ("DefaultCPUAllocator: can't allocate memory"), MemoryError
OUT_OF_MEMORY = ("out of memory", "outofmemoryerror", "can't allocate memory", "cannot allocate memory", "not enough memory", "memoryerror")


def out_of_memory(error: BaseException | str) -> bool:
    """Whether an error (or a recorded reason, `Type: message`) is an allocation that failed."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return any(marker in text.lower() for marker in OUT_OF_MEMORY)


def _gib(nbytes: float) -> str:
    """A size in GiB, or TiB/PiB past 1024 of the one before."""
    value, unit = nbytes / 1024**3, "GiB"
    for larger in ("TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit}"


def _requested(text: str) -> str:
    """How much the failed allocation asked for, as the error says it ('' if it does not)."""
    import re

    found = re.search(r"tried to allocate ([\d.,]+) ?(bytes|[KMGTPE]i?B)\b", text, re.IGNORECASE)
    if not found:
        return ""
    amount, unit = found.groups()
    if unit.lower() == "bytes":
        return _gib(float(amount.replace(",", "")))
    return f"{amount} {unit}"


def memory_summary(device: torch.device) -> str:
    """The device's memory and what is free now, e.g. 'the GPU has 79.2 GiB, 1.3 GiB free'."""
    try:
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            return f"the GPU has {_gib(total)}, {_gib(free)} free"
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if ":" in line and len(line.split()) > 1}
        return f"the machine has {_gib(info['MemTotal'])}, {_gib(info.get('MemAvailable', info.get('MemFree', 0)))} available"
    except Exception:  # noqa: BLE001 - a summary that cannot be read is left out of the message
        return ""


def out_of_memory_message(name: str, batch: int | None, device: torch.device, error: BaseException | str, from_python: bool = False) -> str:
    """One line for a model whose own call ran out of memory: the batch, what it asked for and the
    memory there is, and the fix (a smaller --batch; smaller example inputs for a model passed in Python)."""
    text = error if isinstance(error, str) else str(error)
    facts = [f"it tried to allocate {_requested(text)}" if _requested(text) else "", memory_summary(device)]
    detail = "; ".join(fact for fact in facts if fact)
    at = f" at batch {batch}" if batch else ""
    fix = "pass example inputs with a smaller batch" if from_python else "pass a smaller --batch"
    return f"{name} ran out of {'GPU ' if device.type == 'cuda' else ''}memory{at}{f' ({detail})' if detail else ''}: {fix}"

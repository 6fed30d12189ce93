"""Measured ceilings of a device: copy bandwidth and matmul FLOP/s per dtype.

Datasheet peaks are leads; rooflines use what this device measurably does: the best of repeated
timings, since a ceiling is what the device can do and a busy neighbour only ever slows it. Measured once per
device signature and cached as JSON under `<cache_dir>/ceilings/<signature_id>.json`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path

import torch

from agnitra.fileio import set_aside
from agnitra.telemetry.signature import signature_id
from agnitra.telemetry.timing import best_ms

# (copy buffer bytes, matmul sizes per dtype) sized to fill the device but stay quick; the best
# size wins (CPU BLAS peaks at different sizes, and a shared VM is noisy)
_CPU_PLAN = (256 * 1024**2, {"float32": (1024, 2048), "bfloat16": (1024, 2048)})
_GPU_PLAN = (1024**3, {"bfloat16": (8192,), "float16": (8192,), "float32": (4096,)})
CEILINGS_VERSION = 2  # 2: best of repeats and sizes (1 took the median of one size)


def measure_copy_gbps(device: torch.device, nbytes: int) -> float:
    """Device-to-device copy, counting bytes read plus bytes written."""
    src = torch.randn(nbytes // 4, device=device)  # random, never zeros: they can run faster
    dst = torch.empty_like(src)
    ms = best_ms(lambda: dst.copy_(src), device, repeats=10, warmup=3)
    return 2 * nbytes / (ms / 1e3) / 1e9


SLOW_CALL_S = 0.5  # a first matmul slower than this (a dtype without fast kernels here) is timed once, at one size


def measure_matmul_tflops(device: torch.device, dtype: torch.dtype, n: int) -> tuple[float, bool]:
    """TFLOP/s of an n x n matmul, and whether one call was slow (then timed once, not repeated:
    bf16 without AVX-512 BF16 runs a reference path, 2048^3 in seconds a call)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    first_ms = best_ms(lambda: torch.mm(a, b), device, repeats=1, warmup=0)
    slow = first_ms > SLOW_CALL_S * 1e3
    ms = first_ms if slow else best_ms(lambda: torch.mm(a, b), device, repeats=10, warmup=3)
    return 2 * n**3 / (ms / 1e3) / 1e12, slow


def _best_matmul_tflops(device: torch.device, dtype: torch.dtype, sizes: tuple[int, ...]) -> float:
    best = 0.0
    for n in sizes:
        tflops, slow = measure_matmul_tflops(device, dtype, n)
        best = max(best, tflops)
        if slow:  # the larger sizes would take minutes
            break
    return best


def measure_ceilings(device: torch.device) -> dict:
    copy_bytes, matmul_sizes = _GPU_PLAN if device.type == "cuda" else _CPU_PLAN
    tflops = {}
    for name, sizes in matmul_sizes.items():
        try:
            tflops[name] = round(_best_matmul_tflops(device, getattr(torch, name), sizes), 3)
        except RuntimeError:  # dtype without a matmul kernel on this device
            tflops[name] = None
    return {
        "version": CEILINGS_VERSION,
        "copy_gbps": round(measure_copy_gbps(device, copy_bytes), 1),
        "matmul_tflops": tflops,
        "matmul_sizes": matmul_sizes,
        "fp32_matmul_precision": torch.get_float32_matmul_precision(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def ceilings_path(cache_dir: Path, signature: dict) -> Path:
    return Path(cache_dir) / "ceilings" / f"{signature_id(signature)}.json"


def load_or_measure(device: torch.device, signature: dict, cache_dir: Path, refresh: bool = False) -> dict:
    """Cached ceilings for this signature, measuring (and caching) them the first time."""
    path = ceilings_path(cache_dir, signature)
    note = None
    if path.is_file() and not refresh:
        try:
            data = path.read_bytes()
        except OSError:
            data = None  # unreadable: measured again, and the write below says why if it fails too
        if data is not None:
            cached, damage = _parse(data)
            if cached is not None:
                return {**cached, "cached": True}
            if damage:  # set aside, never read again, and measured again
                aside = set_aside(path)
                note = f"the cached ceilings {path} were damaged ({damage}): set aside as {aside.name if aside else 'gone'} and measured again"
    ceilings = measure_ceilings(device)
    _atomic_write(path, json.dumps(ceilings, indent=2))
    return {**ceilings, "cached": False, **({"note": note} if note else {})}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parse(data: bytes) -> tuple[dict | None, str]:
    """A cached ceilings file's contents, or None with what is wrong with it ('' for a file of an
    older version: measured again, nothing damaged)."""
    try:
        doc = json.loads(data)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return None, f"not JSON: {str(exc).splitlines()[0][:80]}"
    if not isinstance(doc, dict) or not _number(doc.get("version")):
        return None, f"a JSON {type(doc).__name__} without a version, not a ceilings record"
    if doc["version"] != CEILINGS_VERSION:
        return None, ""
    tflops = doc.get("matmul_tflops")
    if not (_number(doc.get("copy_gbps")) and isinstance(tflops, dict) and all(v is None or _number(v) for v in tflops.values())):
        return None, "copy_gbps or matmul_tflops missing or not numbers"
    return doc, ""


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def matmul_peak(ceilings: dict, dtype: torch.dtype) -> float | None:
    """FLOP/s of the matmul ceiling for a dtype (fp32 also stands for other dtypes not measured)."""
    table = ceilings.get("matmul_tflops", {})
    name = str(dtype).replace("torch.", "")
    value = table.get(name) or table.get("float32")
    return value * 1e12 if value else None

"""The device signature: what the hardware and software are, as a stable dict and a short id.

Everything that changes what a measurement means is in it (CPU/GPU model, core and thread
counts, caches, memory, ISA flags, driver, torch/triton versions), so cached ceilings and tuning
results are keyed by `signature_id`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path

import psutil
import torch

# CPU flags that decide which kernels run fast; the rest of /proc/cpuinfo is noise here.
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni")


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def software_versions() -> dict[str, str | None]:
    from agnitra._version import __version__

    return {
        "agnitra": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "cuda": torch.version.cuda,
        "transformers": package_version("transformers"),
        "onnxruntime": package_version("onnxruntime") or package_version("onnxruntime-gpu"),
    }


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key and key not in info:
                info[key] = value.strip()
    except OSError:
        pass
    return info


def _cpu_caches() -> dict[str, int]:
    caches: dict[str, int] = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        multiplier = {"K": 1024, "M": 1024**2}.get(size[-1], 1)
        caches[f"l{level}_bytes"] = int(size.rstrip("KM")) * multiplier
    return caches


def cpu_signature() -> dict:
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    return {
        "kind": "cpu",
        "name": info.get("model name") or platform.processor() or platform.machine(),
        "arch": platform.machine(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "torch_threads": torch.get_num_threads(),
        "isa_flags": sorted(f for f in _ISA_FLAGS if f in flags),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **_cpu_caches(),
        "memory_bytes": psutil.virtual_memory().total,
    }


def _nvidia_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # noqa: BLE001 - NVML absent: fall back to nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_signature(device: torch.device) -> dict:
    props = torch.cuda.get_device_properties(device)
    return {
        "kind": "cuda",
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "memory_bytes": props.total_memory,
        "driver": _nvidia_driver(),
        "host_cpu": _cpuinfo().get("model name"),
    }


def device_signature(device: torch.device) -> dict:
    """Hardware plus the software versions that change what runs on it."""
    hardware = gpu_signature(device) if device.type == "cuda" else cpu_signature()
    versions = software_versions()
    return {**hardware, "torch": versions["torch"], "triton": versions["triton"], "cuda": versions["cuda"]}


def signature_id(signature: dict) -> str:
    """A short stable id: hardware, thread count and torch/triton versions (not memory in use)."""
    keys = ("kind", "name", "arch", "logical_cores", "torch_threads", "isa_flags", "compute_capability", "sm_count", "l2_bytes", "memory_bytes", "driver", "torch", "triton", "cuda")
    stable = {k: signature.get(k) for k in keys}
    digest = hashlib.sha1(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:16]


"""NVML sampling beside a timed region: GPU utilisation, power and the total-energy counter.

`NvmlSampler` runs a thread that reads utilisation and power every `interval_s` while the region
runs, and reads the energy counter (millijoules since driver load) at both ends. Without a GPU or
without NVML it is unavailable and says why; nothing is invented.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

import torch


class GpuReader(Protocol):
    def utilization(self) -> float: ...  # percent of time a kernel ran
    def power_w(self) -> float: ...
    def energy_j(self) -> float | None: ...  # total-energy counter; None where unsupported


class _PynvmlReader:
    def __init__(self, device: torch.device) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = self._handle_for(device)

    def _handle_for(self, device: torch.device):
        props = torch.cuda.get_device_properties(device)
        bus_id = getattr(props, "pci_bus_id", None)
        if bus_id is not None:  # match by PCI address: CUDA and NVML may number devices differently
            address = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus_id:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
            try:
                return self._nvml.nvmlDeviceGetHandleByPciBusId(address)
            except self._nvml.NVMLError:
                pass
        return self._nvml.nvmlDeviceGetHandleByIndex(device.index or 0)

    def utilization(self) -> float:
        return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)

    def power_w(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0

    def energy_j(self) -> float | None:
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000.0
        except self._nvml.NVMLError:
            return None


def open_reader(device: torch.device) -> tuple[GpuReader | None, str]:
    """A reader for `device`, or None and the reason there is none."""
    if device.type != "cuda":
        return None, "NVML measures NVIDIA GPUs only; this run is on the CPU"
    try:
        return _PynvmlReader(device), ""
    except ImportError:
        return None, "pynvml is not installed (pip install nvidia-ml-py, or the agnitra[gpu] extra)"
    except Exception as exc:  # noqa: BLE001 - NVML init errors have many types
        return None, f"NVML could not be initialised: {exc}"


@dataclass
class NvmlSummary:
    duration_s: float
    samples: int
    utilization_mean: float | None
    utilization_max: float | None
    power_mean_w: float | None
    power_max_w: float | None
    energy_j: float | None  # from the counter where it exists, else mean power × duration
    energy_source: str


class NvmlSampler:
    """Context manager sampling a GpuReader in a background thread."""

    def __init__(self, reader: GpuReader, interval_s: float = 0.02) -> None:
        self.reader = reader
        self.interval_s = interval_s
        self._util: list[float] = []
        self._power: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0
        self._e0: float | None = None
        self._e1: float | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def _sample(self) -> None:
        self._util.append(self.reader.utilization())
        self._power.append(self.reader.power_w())

    def __enter__(self) -> "NvmlSampler":
        self._e0 = self.reader.energy_j()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="agnitra-nvml", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample()  # at least one sample, even for a region shorter than the interval
        self._t1 = time.perf_counter()
        self._e1 = self.reader.energy_j()

    def summary(self) -> NvmlSummary:
        duration = self._t1 - self._t0
        power_mean = sum(self._power) / len(self._power) if self._power else None
        if self._e0 is not None and self._e1 is not None:
            energy, source = self._e1 - self._e0, "energy counter"
        elif power_mean is not None:
            energy, source = power_mean * duration, "mean power x duration"
        else:
            energy, source = None, "unavailable"
        return NvmlSummary(
            duration_s=duration,
            samples=len(self._util),
            utilization_mean=sum(self._util) / len(self._util) if self._util else None,
            utilization_max=max(self._util) if self._util else None,
            power_mean_w=power_mean,
            power_max_w=max(self._power) if self._power else None,
            energy_j=energy,
            energy_source=source,
        )

"""Load from other processes on this machine, measured beside a benchmark.

CPU: the busy time of the CPUs this process may run on (psutil's per-CPU times, over an
interval; time stolen by a hypervisor counts as busy) minus this process's own CPU time (all its
threads), in cores: its child processes (compile workers, a burner a test starts) compete for the
cores like any other, so they count as others; and the 1-minute load average. A probe while this process
sleeps measures the others alone; a `CpuMeter` around timed work measures them during it. GPU: the
device's utilisation while this process launches nothing (NVML).
A cgroup CPU quota below the CPUs the process may run on is not seen.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil
import torch

from agnitra.telemetry.nvml import open_reader

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")  # guest time is inside user/nice


@dataclass
class CpuLoad:
    cores: int  # CPUs this process may run on
    other_cores: float  # cores kept busy by other processes over the interval
    own_cores: float  # cores this process used
    seconds: float
    load_average: float  # 1-minute load average of the machine (all its CPUs)


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(psutil.cpu_count() or 1))


class CpuMeter:
    """Other processes' and this process's CPU use between `__init__` (or `start`) and `stop`."""

    def __init__(self) -> None:
        self.cpus = usable_cpus()
        self.process = psutil.Process()
        self.start()

    def start(self) -> None:
        self._t0, self._busy0, self._own0 = time.monotonic(), self._busy_s(), self._own_s()

    def stop(self) -> CpuLoad:
        seconds = max(time.monotonic() - self._t0, 1e-9)
        busy = (self._busy_s() - self._busy0) / seconds
        own = (self._own_s() - self._own0) / seconds
        return CpuLoad(len(self.cpus), max(0.0, busy - own), own, seconds, os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)

    def _busy_s(self) -> float:
        per_cpu = psutil.cpu_times(percpu=True)
        return sum(getattr(per_cpu[i], name, 0.0) for i in self.cpus if i < len(per_cpu) for name in BUSY_FIELDS)

    def _own_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system


def probe_cpu(seconds: float) -> CpuLoad:
    """Other processes' CPU use while this process sleeps for `seconds`."""
    meter = CpuMeter()
    time.sleep(seconds)
    return meter.stop()


def free_cores(load: CpuLoad) -> int:
    """Cores the other processes leave free, at least one."""
    return max(1, round(load.cores - load.other_cores))


def probe_gpu_utilization(device: torch.device) -> tuple[float | None, str]:
    """The GPU's utilisation now, in percent (call it while this process launches nothing: it is
    then the other processes' use), or None and why it is unknown."""
    reader, reason = open_reader(device)
    if reader is None:
        return None, reason
    try:
        return reader.utilization(), ""
    except Exception as exc:  # noqa: BLE001 - NVML errors have many types
        return None, f"NVML could not read the utilisation: {exc}"

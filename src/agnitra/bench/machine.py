"""The machine's state around a benchmark: other processes' load, round-to-round noise, threads.

Before the variants are built, a short probe while this process sleeps measures what other
processes use (CPU cores; on a GPU its utilisation); torch's CPU threads are then sized to the
cores they leave free (at least one, never more than were set) until the run ends. During the
timed rounds the others' CPU use is measured again. With each variant's round-to-round variation
(coefficient of variation of its round medians) this goes into the report's conditions
(`conditions["machine"]`) and, where the machine was busy or the timings noisy, a note.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from agnitra.telemetry.load import CpuLoad, CpuMeter, free_cores, probe_cpu, probe_gpu_utilization

BUSY_SHARE = 0.25  # other processes using a quarter of the cores (at least half a core): busy
BUSY_MIN_CORES = 0.5
BUSY_GPU_PERCENT = 10.0  # the GPU's utilisation while this process launched nothing
NOISY_CV = 0.10  # round-to-round variation of a variant's medians past which timings are noisy
# timed rounds shorter than this are not metered: CPU times tick in 10 ms steps (the probe speaks)
MIN_METERED_S = 0.2


@dataclass
class MachineWatch:
    device: torch.device
    probe_s: float = 0.25
    size_threads: bool = True
    before: CpuLoad | None = None  # others' use while this process slept, before the run
    during: CpuLoad | None = None  # others' use during the timed rounds
    gpu_utilization: float | None = None
    gpu_reason: str = ""
    threads_before: int = field(default_factory=torch.get_num_threads)  # torch's CPU threads as found
    threads: int = field(default_factory=torch.get_num_threads)  # during the run

    @contextlib.contextmanager
    def sized(self) -> Iterator["MachineWatch"]:
        """Probe the others' load, size torch's CPU threads to the free cores; restore after."""
        self.threads_before = self.threads = torch.get_num_threads()
        if self.probe_s > 0:
            self.before = probe_cpu(self.probe_s)
            self.gpu_utilization, self.gpu_reason = probe_gpu_utilization(self.device)
        if self.before and self.size_threads and self.device.type == "cpu":
            self.threads = min(self.threads_before, free_cores(self.before))
        torch.set_num_threads(self.threads)
        try:
            yield self
        finally:
            torch.set_num_threads(self.threads_before)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        meter = CpuMeter()
        try:
            yield
        finally:
            load = meter.stop()
            self.during = load if load.seconds >= MIN_METERED_S else None

    def conditions(self, round_cv: dict[str, float | None]) -> dict[str, Any]:
        load = self.during or self.before
        cond: dict[str, Any] = {
            "cores": load.cores if load else None,
            "other_load_cores": _rounded(load.other_cores if load else None),
            "other_load_cores_before": _rounded(self.before.other_cores if self.before else None),
            "load_average": _rounded(load.load_average if load else None),
            "gpu_utilization_before": self.gpu_utilization,
            "round_cv": {name: _rounded(cv, 3) for name, cv in round_cv.items()},
            "threads_before": self.threads_before,
        }
        reasons = self._busy_reasons(load)
        noisy = {name: cv for name, cv in round_cv.items() if cv is not None and cv >= NOISY_CV}
        cond.update(busy=bool(reasons), noisy=bool(noisy), reason="; ".join(reasons))
        if self.gpu_reason and self.device.type == "cuda":
            cond["gpu_reason"] = self.gpu_reason
        return cond

    def note(self, round_cv: dict[str, float | None]) -> str | None:
        """One line where the machine was busy or the timings noisy, else None."""
        cond = self.conditions(round_cv)
        parts = [f"the machine was busy: {cond['reason']}"] if cond["busy"] else []
        if cond["noisy"]:
            worst = max((cv for cv in round_cv.values() if cv is not None), default=0.0)
            parts.append(f"timings are noisy (round-to-round CV up to {worst:.0%})")
        return "; ".join(parts) or None

    def _busy_reasons(self, load: CpuLoad | None) -> list[str]:
        reasons = []
        if load and load.other_cores >= max(BUSY_MIN_CORES, BUSY_SHARE * load.cores):
            when = "during the timed rounds" if load is self.during else "before the run"
            sized = f"; torch used {self.threads} of {self.threads_before} threads" if self.threads < self.threads_before else ""
            reasons.append(f"other processes used {load.other_cores:.1f} of {load.cores} cores {when}{sized}")
        if self.gpu_utilization is not None and self.gpu_utilization >= BUSY_GPU_PERCENT:
            reasons.append(f"the GPU was {self.gpu_utilization:.0f}% busy with other processes before the run")
        return reasons


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)

"""`agnitra profile`: where the time goes in one workload, and what the device can do.

Latency over timed calls, the operator table (time, FLOPs, bytes per op), peak memory, and on a
GPU an NVML sampler (utilisation, power, energy) running beside the timed region.
"""

from __future__ import annotations

import datetime as dt
from typing import Callable

import torch

from agnitra.models.generate import decode_one_token
from agnitra.results import DeviceReport, ProfileReport
from agnitra.telemetry.memory import peak_memory
from agnitra.telemetry.nvml import NvmlSampler, open_reader
from agnitra.telemetry.opcount import count_ops
from agnitra.telemetry.optable import operator_table
from agnitra.telemetry.signature import software_versions
from agnitra.telemetry.timing import summarize, time_calls
from agnitra.workloads.base import Workload, tensor_leaves


def unit_of_work(workload: Workload) -> Callable:
    """What one timed call is: the forward pass, or one decode step for our decoders."""
    if workload.decoder is not None:
        model = workload.model
        return lambda tokens, pos: decode_one_token(model, tokens, pos)
    return workload.model


def profile_workload(workload: Workload, device: torch.device, device_report: DeviceReport, runs: int = 50, warmup: int = 5, profiler_runs: int = 5) -> ProfileReport:
    fn = unit_of_work(workload)
    inputs = workload.example_inputs
    with torch.no_grad():
        costs = count_ops(fn, *inputs)
        for _ in range(warmup):
            fn(*inputs)
        reader, nvml_reason = open_reader(device)
        if reader is not None:
            with NvmlSampler(reader) as sampler:
                samples = time_calls(lambda _: fn(*inputs), runs, device)
            nvml = sampler.summary().__dict__
        else:
            samples, nvml = time_calls(lambda _: fn(*inputs), runs, device), None
        peak, memory_kind = peak_memory(lambda: fn(*inputs), device)
    ops = operator_table(fn, inputs, device, runs=profiler_runs, warmup=1, costs=costs)
    return ProfileReport(
        workload={"name": workload.name, "source": workload.source, "task": workload.task.value, "weights": workload.weights, "params": workload.param_count(), "dtype": str(workload.dtype).replace("torch.", "")},
        device=device_report,
        conditions={
            "unit": "one decode step" if workload.decoder else "one forward call",
            "shapes": [list(t.shape) for t in tensor_leaves(inputs)],
            "runs": runs,
            "warmup": warmup,
            "profiler_runs": profiler_runs,
            "threads": torch.get_num_threads(),
            "peak_memory": memory_kind,
        },
        latency_ms=summarize(samples),
        ops=ops,
        total_flops=sum(c.flops for c in costs),
        total_bytes=sum(c.bytes for c in costs),
        peak_memory_bytes=peak,
        nvml=nvml,
        nvml_reason=nvml_reason,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        versions=software_versions(),
    )

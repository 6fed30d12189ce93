"""The operator table: torch.profiler self times joined with counted FLOPs and bytes.

Rows are per (operator, input shapes) and per call of the profiled function: time (device time
on a GPU, CPU time on the CPU), calls, FLOPs, bytes read plus written, intensity and share of the
total. The operators the dispatch-level counter sees (aten::addmm, aten::clone) take their
inclusive time, nested calls being their implementation; composite wrappers above them
(aten::linear) keep only their own self time. Every microsecond is counted once.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from agnitra.device import synchronize
from agnitra.results import OpRow
from agnitra.telemetry.opcount import OpCost, aggregate, count_ops


def shape_key(input_shapes) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(s) for s in input_shapes if isinstance(s, (list, tuple)) and len(s) > 0 and all(isinstance(d, int) for d in s))


def _achieved(flops: float, nbytes: float, seconds: float) -> str:
    if seconds <= 0:
        return ""
    parts = []
    if flops:
        parts.append(f"{flops / seconds / 1e12:.3g} TFLOP/s")
    if nbytes:
        parts.append(f"{nbytes / seconds / 1e9:.3g} GB/s")
    return " · ".join(parts)


def profiled_events(fn: Callable[[], object], device: torch.device, runs: int):
    """Top-level operator events (with their trees) of `runs` calls of `fn`."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.no_grad(), profile(activities=activities, record_shapes=True) as prof:
        for _ in range(runs):
            fn()
        synchronize(device)
    # operator events only: GPU kernels hang under the operator that launched them
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and e.cpu_parent is None]


class _Acc:
    def __init__(self) -> None:
        self.calls = 0
        self.time_us = 0.0


def _attribute(event, counted: set, on_gpu: bool, acc: dict) -> None:
    """Walk an event tree: a counted operator takes its inclusive time (its nested calls are
    its implementation); any other operator keeps its self time and its children are visited."""
    key = (event.name, shape_key(event.input_shapes))
    slot = acc.setdefault(key, _Acc())
    slot.calls += 1
    if key in counted:
        slot.time_us += event.device_time_total if on_gpu else event.cpu_time_total
        return
    slot.time_us += event.self_device_time_total if on_gpu else event.self_cpu_time_total
    for child in event.cpu_children:
        _attribute(child, counted, on_gpu, acc)


def operator_table(fn: Callable, inputs: tuple, device: torch.device, runs: int = 5, warmup: int = 2, costs: list[OpCost] | None = None) -> list[OpRow]:
    """Profile `fn(*inputs)` over `runs` calls; rows per call, sorted by time."""
    costs = costs if costs is not None else count_ops(fn, *inputs)
    by_key = aggregate(costs)
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
    synchronize(device)
    acc: dict[tuple, _Acc] = {}
    for event in profiled_events(lambda: fn(*inputs), device, runs):
        _attribute(event, set(by_key), device.type == "cuda", acc)
    rows = []
    for key in set(acc) | set(by_key):
        seen, cost = acc.get(key), by_key.get(key)
        time_us = seen.time_us / runs if seen else 0.0
        calls = seen.calls / runs if seen else cost.calls
        flops, nbytes = (cost.flops, cost.bytes) if cost else (0.0, 0.0)
        if time_us > 0 or flops or nbytes:
            rows.append(_row(key[0], calls, time_us, key[1], flops, nbytes))
    total = sum(r.self_time_us for r in rows) or 1.0
    for r in rows:
        r.share = r.self_time_us / total
    return sorted(rows, key=lambda r: (-r.self_time_us, -r.flops))


def _row(op: str, calls: float, self_us: float, shapes, flops: float, nbytes: float) -> OpRow:
    return OpRow(
        op=op,
        calls=int(round(calls)),
        self_time_us=self_us,
        share=0.0,
        input_shapes=", ".join("x".join(map(str, s)) for s in shapes),
        flops=flops,
        bytes=nbytes,
        intensity=(flops / nbytes) if nbytes else None,
        achieved=_achieved(flops, nbytes, self_us / 1e6),
    )

"""Measured time on the IR: per node and per owning module, from one profiled run.

Each module's forward runs inside a profiler range named after its qualified name. Walking the
profiler's event tree, an operator event that matches an IR node (module, op, input shapes)
takes its inclusive time; a module's self time is its range minus its child modules' ranges, so
Python overhead and launches inside a module count for that module and every microsecond of the
step lands somewhere once.

On a GPU the binding resource is chosen per run: when the GPU is busy for less than 80% of the
step, the step is host-bound (launch overhead) and host times rank the hotspots; otherwise
device (kernel) times do. `ir.timing` records which, and what share of the step named modules
account for.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

import numpy as np
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from agnitra.device import synchronize
from agnitra.ir.graph import GraphIR
from agnitra.ir.trace import module_ranges
from agnitra.telemetry.optable import shape_key
from agnitra.telemetry.timing import time_calls

HOST_BOUND_BELOW = 0.8  # GPU busy fraction under which a step is launch/host-bound
PROFILED_OPS_BUDGET = 20_000  # profiler events kept per attribution: big unrolled graphs get fewer runs


class _Times:
    def __init__(self) -> None:
        self.host = 0.0
        self.device = 0.0
        self.calls = 0


def _walk(event, module: str | None, prefix: str, keys: set, nodes: dict, modules: dict) -> None:
    if event.name.startswith(prefix):
        name = event.name[len(prefix):]
        slot = modules[name]
        slot.host += event.cpu_time_total
        slot.device += event.device_time_total
        slot.calls += 1
        if module is not None:  # the parent's self time excludes this child
            modules[module].host -= event.cpu_time_total
            modules[module].device -= event.device_time_total
        for child in event.cpu_children:
            _walk(child, name, prefix, keys, nodes, modules)
        return
    key = (module or "", event.name, shape_key(event.input_shapes))
    if key in keys:
        slot = nodes[key]
        slot.host += event.cpu_time_total
        slot.device += event.device_time_total
        slot.calls += 1
        return
    for child in event.cpu_children:
        _walk(child, module, prefix, keys, nodes, modules)


def attribute_time(ir: GraphIR, fn: Callable, model: torch.nn.Module, inputs: tuple, device: torch.device, runs: int = 10, warmup: int = 3) -> None:
    """Time `fn(*inputs)` (which runs `model`) and write node/module times into the IR."""
    runs = max(1, min(runs, PROFILED_OPS_BUDGET // max(1, len(ir.nodes))))
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        synchronize(device)
        measured = float(np.median(time_calls(lambda _: fn(*inputs), max(runs, 3), device)))
        keys = {(n.module, n.op, tuple(tuple(s) for s in n.input_shapes if s)) for n in ir.nodes}
        node_times: dict = defaultdict(_Times)
        module_times: dict = defaultdict(_Times)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with module_ranges(model) as prefix, profile(activities=activities, record_shapes=True) as prof:
            for _ in range(runs):
                fn(*inputs)
            synchronize(device)
    for event in prof.events():
        if event.device_type == DeviceType.CPU and event.cpu_parent is None:
            _walk(event, None, prefix, keys, node_times, module_times)
    _write(ir, node_times, module_times, measured, runs, device)


def _write(ir: GraphIR, node_times: dict, module_times: dict, measured_ms: float, runs: int, device: torch.device) -> None:
    root = module_times.get("")
    profiled_host = (root.host if root else 0.0) / runs
    total_host = sum(m.host for m in module_times.values()) / runs
    device_busy = sum(m.device for m in module_times.values()) / runs
    resource = "host"
    if device.type == "cuda" and device_busy >= HOST_BOUND_BELOW * measured_ms * 1e3:
        resource = "device"
    pick = (lambda t: t.device) if resource == "device" else (lambda t: t.host)
    step_us = (device_busy if resource == "device" else total_host) or 1.0
    same_key: dict = defaultdict(int)
    for n in ir.nodes:
        same_key[(n.module, n.op, tuple(tuple(s) for s in n.input_shapes if s))] += 1
    for n in ir.nodes:
        key = (n.module, n.op, tuple(tuple(s) for s in n.input_shapes if s))
        seen = node_times.get(key)
        n.time_us = pick(seen) / runs / same_key[key] if seen else 0.0
        n.share = n.time_us / step_us
    modules = {name: pick(t) / runs for name, t in module_times.items()}
    named = sum(v for k, v in modules.items() if k)
    ir.timing = {
        "resource": resource,
        "runs": runs,
        "measured_ms": measured_ms,
        "profiled_ms": profiled_host / 1e3,
        "device_busy_ms": device_busy / 1e3 if device.type == "cuda" else None,
        "step_us": step_us,
        "attributed_share": named / step_us,
        "node_share": sum(n.time_us or 0.0 for n in ir.nodes) / step_us,
        "modules": modules,
    }

"""Hotspots: the IR's measured time rolled up to the modules that own it.

Answers "which few modules take most of the time, and why": each module's share of the measured
time, its FLOPs and bytes, arithmetic intensity, the op kind that dominates its time, and whether
it is memory- or compute-bound on this device.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from agnitra.ir.graph import GraphIR


@dataclass
class Hotspot:
    module: str  # qualified name; "" is the root module (ops outside any submodule)
    module_type: str
    kind: str  # the op kind with the largest time (or FLOPs when untimed) inside the module
    time_us: float | None
    share: float | None  # of the measured total
    flops: float
    bytes: float
    intensity: float | None
    bound: str  # memory | compute: the roofline class of the module's work on this device
    nodes: int


def module_hotspots(ir: GraphIR, ceilings: dict | None = None, dtype=None) -> list[Hotspot]:
    """Per owning module (the innermost one), sorted by measured time, else by FLOPs.

    A module's time is its measured self time (`ir.timing["modules"]`: its profiler range minus
    its children's) when timed, so its Python overhead and launches count too; else the sum of
    its nodes' times.
    """
    groups: dict[str, list] = defaultdict(list)
    for node in ir.nodes:
        groups[node.module].append(node)
    module_times = ir.timing.get("modules", {})
    for module in module_times:
        groups.setdefault(module, [])
    timed = any(n.time_us is not None for n in ir.nodes) or bool(module_times)
    total = ir.timing.get("step_us") or (sum(n.time_us or 0.0 for n in ir.nodes) if timed else 0.0)
    spots = []
    for module, nodes in groups.items():
        flops = sum(n.flops for n in nodes)
        nbytes = sum(n.bytes for n in nodes)
        time_us = (module_times[module] if module in module_times else sum(n.time_us or 0.0 for n in nodes)) if timed else None
        by_kind: dict[str, float] = defaultdict(float)
        for n in nodes:
            by_kind[n.kind] += (n.time_us or 0.0) if timed else n.flops
        spots.append(
            Hotspot(
                module=module,
                module_type=nodes[0].module_type if nodes else "",
                kind=max(by_kind, key=by_kind.get) if by_kind else "other",
                time_us=time_us,
                share=(time_us / total) if timed and total else None,
                flops=flops,
                bytes=nbytes,
                intensity=flops / nbytes if nbytes else None,
                bound=roofline_class(flops, nbytes, ceilings, dtype),
                nodes=len(nodes),
            )
        )
    return sorted(spots, key=lambda s: (-(s.time_us or 0.0), -s.flops))


def roofline_class(flops: float, nbytes: float, ceilings: dict | None, dtype=None) -> str:
    """'compute' when FLOPs / peak exceed bytes / bandwidth on this device, else 'memory'."""
    if not ceilings or not nbytes:
        return "compute" if flops else ""
    from agnitra.telemetry.ceilings import matmul_peak

    peak = matmul_peak(ceilings, dtype) if dtype is not None else None
    bandwidth = ceilings.get("copy_gbps")
    if not peak or not bandwidth:
        return ""
    return "compute" if flops / peak > nbytes / (bandwidth * 1e9) else "memory"


def covering(spots: list[Hotspot], fraction: float = 0.8) -> list[Hotspot]:
    """The fewest hotspots whose shares add up to `fraction` of the time."""
    chosen, acc = [], 0.0
    for s in spots:
        if acc >= fraction or s.share is None:
            break
        chosen.append(s)
        acc += s.share
    return chosen

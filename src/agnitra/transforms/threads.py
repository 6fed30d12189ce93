"""`threads`: the CPU model runs with a chosen number of intra-op threads (default: one per
physical core, where hyper-threads sharing a core's vector units rarely help dense math).

The thread count is set around each call and restored after it, also when the call raises, so
the rest of the process keeps its own setting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from agnitra.errors import check
from agnitra.transforms.base import Choice, Step, Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import ModelWrapper


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-thread siblings counted once)."""
    cores = set()
    for cpu in _usable_cpus():
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topology.joinpath("physical_package_id").read_text().strip(), topology.joinpath("core_id").read_text().strip()))
        except OSError:
            return _physical_cores_elsewhere()
    return max(1, len(cores))


def _physical_cores_elsewhere() -> int:
    try:
        import psutil

        return max(1, min(psutil.cpu_count(logical=False) or 1, len(_usable_cpus())))
    except ImportError:
        return max(1, len(_usable_cpus()))


class ThreadsWrapper(ModelWrapper):
    """Calls the inner model with `count` intra-op threads, then restores the previous count."""

    def __init__(self, inner: nn.Module, count: int) -> None:
        super().__init__(inner)
        self.count = count

    def forward(self, *args, **kwargs):
        if torch.compiler.is_compiling():  # inside a traced whole graph (a decoder's compiled step): the caller's count holds
            return self.inner(*args, **kwargs)
        previous = torch.get_num_threads()
        if previous != self.count:
            torch.set_num_threads(self.count)
        try:
            return self.inner(*args, **kwargs)
        finally:
            if torch.get_num_threads() != previous:
                torch.set_num_threads(previous)


@register_transform
class Threads(Transform):
    name = "threads"
    description = "a chosen number of intra-op CPU threads while the model runs (0: one per physical core)"
    requires = "the CPU"
    stage = "runtime"

    @dataclass
    class Params:
        count: int = 0

    order = 60  # around compile's wrapper: the count holds while the compiled code runs

    def choices(self, ctx: TransformContext) -> list[Choice]:
        """All physical cores (0), half of them, one: small models and batch-1 calls often lose
        more to thread start-up and synchronisation than the extra cores give."""
        cores = physical_cores()
        out = [Choice(self.name, (), 1.02)]
        if cores >= 4:
            out.append(Choice(self.name, (("count", cores // 2),), 0.97))
        if cores >= 2:
            out.append(Choice(self.name, (("count", 1),), 0.8))
        return out

    def conflict(self, params, others: list[Step], ctx: TransformContext) -> str | None:
        if ctx.decoder and any(s.transform == "compile" for s in others):
            return "a decoder's compiled decode step is traced whole (fullgraph): the thread count cannot be set inside it"
        return None

    def check(self, ctx: TransformContext, params) -> None:
        check(params.count >= 0, f"threads count must be 0 (physical cores) or more, not {params.count}")
        check(ctx.device.type == "cpu", f"the thread count matters on the CPU; this run is on {ctx.device.type.upper()}")
        usable = len(_usable_cpus())
        check(params.count <= usable, f"threads count {params.count} is more than the {usable} CPUs this process may run on")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        return ThreadsWrapper(model, params.count or physical_cores())

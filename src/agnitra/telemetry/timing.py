"""Timing primitives: CUDA events on the GPU, the host's monotonic clock on the CPU.

Device work is asynchronous, so GPU times come from events recorded on the stream around each
call and are read after one synchronisation at the end, never from host clocks mid-stream.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from agnitra.results import Latency


def summarize(samples_ms: list[float]) -> Latency:
    a = np.asarray(samples_ms, dtype=np.float64)
    return Latency(
        median=float(np.median(a)),
        p95=float(np.percentile(a, 95)),
        min=float(a.min()),
        mean=float(a.mean()),
        samples=int(a.size),
    )


def time_calls(fn: Callable[[int], object], count: int, device: torch.device) -> list[float]:
    """Milliseconds of each of `count` calls `fn(i)`."""
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        torch.cuda.synchronize(device)
        for i in range(count):
            starts[i].record()
            fn(i)
            ends[i].record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]
    times = []
    for i in range(count):
        t0 = time.perf_counter_ns()
        fn(i)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return times


def time_device_calls(fn: Callable[[int], object], count: int, device: torch.device, per_graph: int = 20) -> list[float]:
    """Device milliseconds per call, launch overhead excluded, as calls run inside a decode CUDA graph.

    `per_graph` calls (fn(0), fn(1), ...: rotate inputs there) are captured into one CUDA graph,
    replayed `count` times; each sample is one replay's time over `per_graph`. A kernel of a few
    microseconds timed from the host measures the host; this measures the kernel. Off the GPU, or
    when the calls cannot be captured (a host sync inside), it falls back to `time_calls`.
    """
    if device.type != "cuda":
        return time_calls(fn, count, device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(stream):  # warm-up off the default stream, as capture requires
            for i in range(per_graph):
                fn(i)
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(per_graph):
                fn(i)
    except RuntimeError:
        torch.cuda.synchronize(device)
        return time_calls(fn, count, device)
    graph.replay()
    samples = time_calls(lambda _: graph.replay(), count, device)
    return [t / per_graph for t in samples]


class StepClock:
    """Marks between decode steps; `intervals_ms()` gives the time between consecutive marks."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self._marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append(event)
        else:
            self._marks.append(time.perf_counter_ns())

    def intervals_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) for a, b in zip(self._marks, self._marks[1:])]
        return [(b - a) / 1e6 for a, b in zip(self._marks, self._marks[1:])]


def best_ms(fn: Callable[[], object], device: torch.device, repeats: int = 10, warmup: int = 3) -> float:
    """Fastest milliseconds of `fn()` over `repeats` calls after warm-up."""
    for _ in range(warmup):
        fn()
    return float(min(time_calls(lambda _: fn(), repeats, device)))

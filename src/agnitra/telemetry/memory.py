"""Peak memory of a region: peak allocated on the GPU, peak RSS growth on the CPU."""

from __future__ import annotations

import ctypes
import gc
import threading
from typing import Callable

import psutil
import torch


def _release_free_heap() -> None:
    """Give freed heap pages back to the OS so RSS growth measures this region, not the last.
    The young generations only: what the last region made is there, and a full collection walks
    every object a process with torch imported holds (0.3 s; 12% of the test suite's CPU)."""
    gc.collect(1)
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class _RssPeak:
    def __init__(self, interval_s: float = 0.001) -> None:
        self._proc = psutil.Process()
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "_RssPeak":
        self.peak = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def resident_bytes(module: torch.nn.Module, device: torch.device) -> int:
    """Bytes of `module`'s parameters and buffers on `device`'s kind, each storage counted once
    (views and tensors shared between modules are not counted twice)."""
    storages: dict[int, int] = {}
    for t in list(module.parameters()) + list(module.buffers()):
        if t.device.type == device.type:
            storages.update(_storages(t))
    return sum(storages.values())


def _storages(t: torch.Tensor) -> dict[int, int]:
    """{storage address: bytes} of a tensor, or of the tensors a wrapper subclass holds (a 2:4
    semi-structured weight: its packed values and metadata; it has no storage of its own)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        found: dict[int, int] = {}
        for name in t.__tensor_flatten__()[0]:
            inner = getattr(t, name)
            if isinstance(inner, torch.Tensor):
                found.update(_storages(inner))
        return found
    try:
        storage = t.untyped_storage()
        return {storage.data_ptr(): storage.nbytes()}
    except (RuntimeError, NotImplementedError):  # a subclass without storage that does not flatten: its logical size
        return {id(t): t.numel() * t.element_size()}


def peak_memory(fn: Callable[[], object], device: torch.device) -> tuple[int, str]:
    """(bytes, kind) for one call of `fn`. GPU: peak allocated, weights included. CPU: RSS growth."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device)), "cuda_peak_allocated"
    _release_free_heap()
    base = psutil.Process().memory_info().rss
    with _RssPeak() as rss:
        fn()
    return max(0, rss.peak - base), "cpu_rss_growth"

"""`agnitra tune-matmul`: tune the matmul template for one problem and compare with torch.matmul
(cuBLAS on a GPU) measured in the same run on the same rotating inputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agnitra.kernels.autotune import TuneResult, input_sets, tune
from agnitra.kernels.spec import get_kernel, triton_available
from agnitra.kernels.tuning_cache import TuningCache
from agnitra.telemetry.timing import time_device_calls


@dataclass
class MatmulTuning:
    result: TuneResult
    torch_ms: float
    flops: float

    def tflops(self, ms: float | None) -> float | None:
        return self.flops / (ms / 1e3) / 1e12 if ms else None

    @property
    def vs_torch(self) -> float:
        """> 1: the tuned kernel is faster than torch.matmul."""
        return self.torch_ms / self.result.best_ms


def tune_matmul(shape: tuple[int, int, int], dtype: torch.dtype, device: torch.device, *, runs: int, cache: TuningCache | None, l2_bytes: int | None, force: bool = True, kernel: str = "matmul", max_trials: int = 40, progress=None) -> MatmulTuning:
    usable, reason = triton_available(device)
    if not usable:
        from agnitra.errors import UserError

        raise UserError(reason)
    spec = get_kernel(kernel)
    result = tune(spec, shape, dtype, device, runs=runs, cache=cache, force=force, l2_bytes=l2_bytes, max_trials=max_trials, progress=progress)
    sets = input_sets(spec, shape, dtype, device, l2_bytes)
    baseline = spec.reference  # the PyTorch reference is the cuBLAS call (same epilogue)
    for i in range(3):
        baseline(*sets[i % len(sets)])
    torch_ms = float(np.median(time_device_calls(lambda i: baseline(*sets[i % len(sets)]), runs, device)))
    return MatmulTuning(result, torch_ms, spec.flops(shape))

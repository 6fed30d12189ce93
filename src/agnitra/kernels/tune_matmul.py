"""`agnitra tune-matmul`: tune the matmul template for one problem and compare with torch.matmul
(cuBLAS on a GPU) measured in the same run on the same rotating inputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agnitra.kernels.autotune import TuneResult, head_to_head, input_sets, tune
from agnitra.kernels.spec import get_kernel, triton_available
from agnitra.kernels.tuning_cache import TuningCache


@dataclass
class MatmulTuning:
    result: TuneResult
    torch_ms: float  # torch.matmul, timed head to head with the winner
    flops: float
    best_ms: float  # the winner, timed head to head with torch.matmul (result.best_ms: its search time)

    def tflops(self, ms: float | None) -> float | None:
        return self.flops / (ms / 1e3) / 1e12 if ms else None

    @property
    def vs_torch(self) -> float:
        """> 1: the tuned kernel is faster than torch.matmul (head to head)."""
        return self.torch_ms / self.best_ms


def tune_matmul(shape: tuple[int, int, int], dtype: torch.dtype, device: torch.device, *, runs: int, cache: TuningCache | None, l2_bytes: int | None, force: bool = True, kernel: str = "matmul", max_trials: int = 40, progress=None) -> MatmulTuning:
    usable, reason = triton_available(device)
    if not usable:
        from agnitra.errors import UserError

        raise UserError(reason)
    spec = get_kernel(kernel)
    sets = input_sets(spec, shape, dtype, device, l2_bytes)
    result = tune(spec, shape, dtype, device, runs=runs, cache=cache, force=force, l2_bytes=l2_bytes, max_trials=max_trials, progress=progress, sets=sets)
    baseline = spec.reference  # the PyTorch reference is the cuBLAS call (same epilogue)
    for i in range(3):
        baseline(*sets[i % len(sets)])
    # the winner and cuBLAS head to head (interleaved rounds): the GPU's clocks drift as it heats
    # during a search, and a baseline timed alone afterwards would meet other clocks than the trials
    ours = lambda i: spec.launch(*sets[i % len(sets)], config=result.best)  # noqa: E731
    best_ms, torch_ms = head_to_head([ours, lambda i: baseline(*sets[i % len(sets)])], runs, device, rounds=5)
    return MatmulTuning(result, torch_ms, spec.flops(shape), best_ms)

"""The GPU brought to the state sustained work runs in, before a benchmark times anything.

On the H100 a kernel timed on a GPU that has done no heavy memory traffic yet is faster than the
same kernel after such traffic, and stays slower after it for at least 35 s idle, at the same SM and
memory clocks and no throttle reason (peer-drift-*.json: the 14336x4096 int4 GEMV 12.07 us before
any 1 GiB stream, 12.26-12.34 after, whether the stream ran in this process or in another; an
untouched 1 GiB allocation changes nothing). A model's decode runs in that later state, so the
benchmarks time there: `settle` streams a 1 GiB buffer for a second first.
"""

from __future__ import annotations

import time

import torch

SETTLE_BYTES = 1024**3


def settle(device: torch.device, seconds: float = 1.0) -> dict | None:
    """Stream SETTLE_BYTES through the GPU (read and written in place) for `seconds`; what was done,
    for the result file (None off a GPU)."""
    if device.type != "cuda":
        return None
    buffer = torch.ones(SETTLE_BYTES // 4, device=device)
    start, passes = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            buffer.mul_(1.0)
        torch.cuda.synchronize(device)
        passes += 20
    del buffer
    return {"bytes": SETTLE_BYTES, "passes": passes, "seconds": round(time.perf_counter() - start, 2),
            "why": "kernels timed after sustained memory traffic, as a model runs them (benchmarks/steady.py)"}

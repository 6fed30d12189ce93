"""A fresh cache folder for a test that needs its own (to read its log there, or to start without
tuning), holding CPU ceilings given rather than measured: measuring them costs 8 s of CPU."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def seeded_cache(folder: Path, threads: tuple[int, ...] = ()) -> Path:
    """`folder` with ceilings for this process's torch threads and for each of `threads` (the
    signature counts threads: a process the test starts has torch's default, not the worker's)."""
    from agnitra.telemetry.ceilings import CEILINGS_VERSION, ceilings_path
    from agnitra.telemetry.signature import device_signature

    own = torch.get_num_threads()
    try:
        for count in dict.fromkeys((own, *threads)):
            torch.set_num_threads(count)
            path = ceilings_path(folder, device_signature(torch.device("cpu")))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"version": CEILINGS_VERSION, "copy_gbps": 10.0, "matmul_tflops": {"float32": 0.1}}))
    finally:
        torch.set_num_threads(own)
    return folder

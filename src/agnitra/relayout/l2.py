"""Each layout mode's L2 hit rate: the mode's model, as served, run in a child process under
Nsight Compute (`telemetry/l2.py`). The child holds the same workload as this process (rebuilt
from its spec, or a pickled copy, as a candidate's worker does), loads the mode's weights, puts
them in the serving kernel's format and runs the harness's calls inside the profiled range.

    python -m agnitra.relayout.l2 PAYLOAD   (the child; PAYLOAD written by `l2_of`)"""

from __future__ import annotations

import pickle
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from agnitra.relayout.serve import Kernel
from agnitra.telemetry.l2 import L2Reading, measure

L2_UNITS = 1  # calls profiled: a decoder's generation each (its prefill and every step); ncu stops at MAX_KERNELS


def l2_of(source, models: dict[str, tuple[nn.Module | None, Kernel | None]], folder: Path | None = None, timeout_s: float = 180.0) -> dict[str, tuple[L2Reading | None, str]]:
    """The L2 reading of each named model (None: the workload's own) served by its kernel, or
    None and why. `source` is a `WorkloadSource` (how a child holds this workload). Where one
    runs past `timeout_s`, the rest are not profiled (they would too)."""
    found: dict[str, tuple[L2Reading | None, str]] = {}
    with tempfile.TemporaryDirectory(prefix="agnitra-l2-") as tmp:
        for index, (name, (model, kernel)) in enumerate(models.items()):
            if any(why.startswith("ncu ran past") for _, why in found.values()):
                found[name] = (None, "not profiled: ncu ran past its time on an earlier model")
                continue
            place = Path(folder) if folder is not None else Path(tmp)
            state = None
            if model is not None:
                state = Path(tmp) / f"state-{index}.pt"
                torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, state)
            payload = Path(tmp) / f"payload-{index}.pkl"
            payload.write_bytes(pickle.dumps({"source": source, "state": str(state) if state else None, "kernel": kernel, "name": name, "sys_path": list(sys.path)}))
            profile = place / f"ncu-{index}"
            profile.mkdir(exist_ok=True)
            found[name] = measure(["-m", "agnitra.relayout.l2", str(payload)], profile, timeout_s)
    return found


def _child(payload_path: str) -> None:
    from agnitra.bench.harness import BenchConfig, benchmark
    from agnitra.bench.variants.given import GivenModel
    from agnitra.relayout.serve import serve
    from agnitra.results import DeviceReport
    from agnitra.telemetry.signature import device_signature

    started = time.monotonic()
    payload = pickle.loads(Path(payload_path).read_bytes())  # written by this package's parent process (l2_of)
    sys.path[:] = payload["sys_path"]  # where the parent's own modules (its registered transforms and variants) are found, as a worker's
    workload, device = payload["source"].load()
    print(f"agnitra-l2: {payload['name']}: workload held after {time.monotonic() - started:.1f} s", flush=True)
    model = workload.model
    if payload["state"]:
        model.load_state_dict(torch.load(payload["state"], map_location=device, weights_only=True))
    model, said = serve(model, workload, device, payload["kernel"])
    print(f"agnitra-l2: {payload['name']}: {said or 'as it is'}", flush=True)
    config = BenchConfig(variants=[GivenModel(payload["name"], model)], runs=1, warmup=0, check=False, op_breakdown=False, energy=False,
                         signature=False, roofline=False, shape_check=False, load_probe_s=0.0, l2_units=L2_UNITS)
    signature = device_signature(device)  # no roofline here: the ceilings are not measured
    report = benchmark(workload, device, DeviceReport(signature["name"], device.type, signature, {}), config)
    print(f"agnitra-l2: {payload['name']}: calls run after {time.monotonic() - started:.1f} s", flush=True)
    row = report.variants[0]
    if row.status != "ok":
        raise SystemExit(f"agnitra-l2: {payload['name']}: {row.status}: {row.reason}")


if __name__ == "__main__":
    _child(sys.argv[1])

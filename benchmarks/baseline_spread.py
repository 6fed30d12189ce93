"""How much a host-bound eager baseline moves between runs of one process, and whether a compile
just before is why.

The search screens every candidate against the baseline of its own short run. On small GPU models
the eager baseline is bound by the host's launch time, and between runs of one process it moved
from 2.2 to 6.7 ms (screen-agreement-*.json): a screened speedup then says more about the
baseline's state than about the candidate. This times the baseline alone, run after run (the
search's screening run: warm-up 3, 20 calls; 30 in the runs of 2026-11-26), three ways: cold (nothing compiled yet), right after
a torch.compile(reduce-overhead) of the same model (Inductor's compile workers alive), and after
those workers are shut down. Each run's median, the load average, and the process's child count
go to the result file.

    PYTHONPATH=src python benchmarks/baseline_spread.py --device cuda --workload hf:mistral --out-file /tmp/out/baseline-spread.json

Measured on an H100 (baseline-spread-*-nvidia-h100-80gb-hbm3-2026-11-26.json), size moderate, fp16:
the eager step jumps between levels that last a run or several (mistral 3.6, 4.7 and 6-7 ms;
whisper-encoder 2.3-2.8 and 3.5-4.6 ms), 1.6-1.9x apart in every phase, cold included: compile
workers are not the cause. Pinned to one core (`taskset -c 3`, the -pinned file) the spread
narrowed to 1.2-1.5x, not away. A device-bound candidate (a CUDA graph replay) does not move with
it, so its screened speedup does. Next: screen device-bound candidates against the search's pooled
baseline, not their own run's alone.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screen_agreement import _workload  # noqa: E402

RUNS = 8


def _children() -> int:
    try:
        import psutil

        return len(psutil.Process().children(recursive=True))
    except Exception:  # noqa: BLE001 - psutil is optional here
        return -1


def _baseline_runs(workload, device, device_report, screening, label: str, runs: int) -> list[dict]:
    from agnitra.bench.harness import BenchConfig, Harness
    from agnitra.bench.variants.eager import Eager

    rows = []
    for i in range(runs):
        config = BenchConfig(**{**screening.__dict__, "variants": [Eager()], "check": False, "shape_check": False})
        t0 = time.perf_counter()
        report = Harness(workload, device, device_report, config).run()
        v = report.variants[0]
        rows.append({"phase": label, "run": i, "median_ms": v.latency_ms.median if v.latency_ms else None, "p95_ms": v.latency_ms.p95 if v.latency_ms else None,
                     "wall_s": round(time.perf_counter() - t0, 2), "load1": round(os.getloadavg()[0], 2), "children": _children()})
        print(f"  {label} {i}: {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="hf:mistral")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--out-file", default=None)
    args = parser.parse_args()
    import torch

    from agnitra import api
    from agnitra.device import resolve_device
    from agnitra.results import to_dict
    from agnitra.telemetry.signature import software_versions

    device = resolve_device(args.device)
    device_report = api.describe_device(device)
    workload = _workload(args.workload, device, args.dtype)
    from agnitra.search.tuner import SearchConfig

    screening = SearchConfig().bench([], False)
    rows = _baseline_runs(workload, device, device_report, screening, "cold", args.runs)
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    compiled = api.recipe_variant(f"compile(mode={mode})").prepare(workload, device)
    t0 = time.perf_counter()
    for _ in range(5):
        compiled.call(*workload.example_inputs)
    torch.cuda.synchronize() if device.type == "cuda" else None
    compile_s = round(time.perf_counter() - t0, 1)
    rows += _baseline_runs(workload, device, device_report, screening, "after-compile", args.runs)
    try:
        from torch._inductor.async_compile import shutdown_compile_workers

        shutdown_compile_workers()
        shut = "shutdown_compile_workers()"
    except Exception as exc:  # noqa: BLE001 - not in every torch
        shut = f"not shut down ({exc})"
    rows += _baseline_runs(workload, device, device_report, screening, "workers-shut", args.runs)
    del compiled
    summary = {}
    for phase in ("cold", "after-compile", "workers-shut"):
        medians = [r["median_ms"] for r in rows if r["phase"] == phase and r["median_ms"]]
        summary[phase] = {"median_of_medians": round(statistics.median(medians), 4), "min": round(min(medians), 4), "max": round(max(medians), 4),
                          "max_over_min": round(max(medians) / min(medians), 3)}
    doc = {"schema": "agnitra.baseline-spread/1", "date": dt.date.today().isoformat(), "device": to_dict(device_report), "versions": software_versions(),
           "command": " ".join(sys.argv), "workload": args.workload, "dtype": args.dtype, "compile_s": compile_s, "workers": shut,
           "conditions": f"eager alone in the search's screening run (warm-up {screening.warmup}, {screening.runs} calls, 5 a round), no checks; runs one after another in one process",
           "summary": summary, "runs": rows}
    slug = "".join(ch if ch.isalnum() else "-" for ch in device_report.name.lower()).strip("-")
    path = Path(args.out_file or f"benchmarks/results/baseline-spread-{slug}-{dt.date.today().isoformat()}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(json.dumps(summary, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

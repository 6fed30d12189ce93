"""The matmul template's configurations and cuBLAS at one problem, round by round: drift and spread.

    PYTHONPATH=src python benchmarks/matmul_rounds.py --dim 4096 --rounds 8 --out-file rounds.json

Each round times every contender once (`autotune.timed_rounds`: `--runs` replays of a CUDA graph
of 20 calls over rotating inputs), the order reversed every other round. Per-round medians show
whether a contender drifts with the GPU's clocks or has two speeds; the file keeps them all, with
the device, versions and the SM clock read before and after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys

import numpy as np
import torch

from agnitra.kernels.autotune import input_sets, timed_rounds
from agnitra.kernels.matmul import matmul_default_config
from agnitra.kernels.spec import get_kernel
from agnitra.telemetry.signature import software_versions


def _clocks() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,temperature.gpu,power.draw", "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    device, dtype, shape = torch.device("cuda"), torch.bfloat16, (args.dim,) * 3
    spec = get_kernel("matmul")
    sets = input_sets(spec, shape, dtype, device, torch.cuda.get_device_properties(device).L2_cache_size)
    tma = {**matmul_default_config(shape, dtype), "TMA": True}
    contenders = {
        "pointer_default": lambda i: spec.launch(*sets[i % len(sets)], config=matmul_default_config(shape, dtype)),
        "tma_128x256x64_s3": lambda i: spec.launch(*sets[i % len(sets)], config=tma),
        "cublas": lambda i: spec.reference(*sets[i % len(sets)]),
    }
    for call in contenders.values():
        for i in range(3):
            call(i)
    before = _clocks()
    samples = timed_rounds(list(contenders.values()), args.runs, device, args.rounds)
    rounds = {name: [float(np.median(r)) for r in per_round] for name, per_round in zip(contenders, samples)}
    for r in range(args.rounds):
        print(r, {n: round(v[r] * 1e3, 1) for n, v in rounds.items()}, flush=True)
    flops = 2.0 * args.dim ** 3
    summary = {n: {"median_ms": float(np.median(v)), "min_ms": min(v), "max_ms": max(v), "tflops": flops / (np.median(v) / 1e3) / 1e12} for n, v in rounds.items()}
    summary["ratio_tma_vs_cublas"] = summary["cublas"]["median_ms"] / summary["tma_128x256x64_s3"]["median_ms"]
    with open(args.out_file, "w") as out:
        json.dump({"schema": "agnitra.matmul-rounds/1", "date": dt.date.today().isoformat(), "device": torch.cuda.get_device_name(device),
                   "versions": software_versions(), "command": " ".join(sys.argv), "shape": list(shape), "dtype": "bfloat16",
                   "clocks_before": before, "clocks_after": _clocks(), "rounds_ms": rounds, "summary": summary}, out, indent=2)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

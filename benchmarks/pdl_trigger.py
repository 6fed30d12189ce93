"""The batch-1 GEMVs with and without programmatic dependent launch, by trigger point, head to head.

    PYTHONPATH=src python benchmarks/pdl_trigger.py --shapes 2048x2048,256x2048 --out-file out.json

For each N x K and each of int8_gemv / int4_gemv: the tuned configuration (from the tuning cache,
tuned here where missing) timed as decode runs it (CUDA graphs of 20 calls, inputs rotated past
L2) without PDL and with the next kernel let in at each point (`pdl.PDL_TRIGGERS`: once
past its wait, after its main loop; the first run, pdl-trigger-*-2026-11-22.json, also had "at
its start", since dropped: unsafe beside kernels that do not always wait), in interleaved rounds. A chain of
the same GEMV is the case most favourable to PDL (each call's successor is launched with it);
`--mixed` also times a chain where a non-PDL torch kernel (an in-place add over x) runs between
calls, as Inductor's kernels sit between ours in a compiled model.
"""

from __future__ import annotations

import argparse
import sys

import torch

from agnitra import api
from agnitra.config import load_settings
from agnitra.device import resolve_device
from agnitra.kernels import pdl
from agnitra.kernels.autotune import head_to_head, input_sets, tune
from agnitra.kernels.spec import get_kernel
from agnitra.kernels.tuning_cache import TuningCache
from result_file import write_result  # benchmarks/


def gemv_context() -> tuple:
    """(device, its report, the tuning cache, L2 bytes): the CUDA device these scripts tune and time on."""
    device = resolve_device("cuda")
    report = api.describe_device(device)
    return device, report, TuningCache(load_settings().cache_path, report.signature["id"]), report.signature.get("l2_bytes")


def settled_gemv_context() -> tuple[tuple, dict | None]:
    """(`gemv_context()`, what settling did): the device brought to its sustained-work state first (`steady.settle`)."""
    from steady import settle  # benchmarks/

    context = gemv_context()
    return context, settle(context[0])


def tuned_gemv(spec, n: int, k: int, context: tuple, runs: int, max_trials: int, m: int = 1) -> tuple:
    """(shape, input sets rotated past L2, tuned configuration) of `spec` at batch m (default 1: a GEMV), N x K (int4: groups
    of 128; the fused decode GEMVs: N outputs or pairs)."""
    device, _, cache, l2 = context
    shape = (m, n, k, 128) if spec.name.startswith("int4") else (m, n, k)
    sets = input_sets(spec, shape, torch.bfloat16, device, l2)
    best = tune(spec, shape, torch.bfloat16, device, runs=runs, cache=cache, l2_bytes=l2, force=False, max_trials=max_trials, sets=sets).best
    return shape, sets, best


def variants(best: dict) -> dict[str, dict]:
    return {"off": {**best, "PDL": False}, **{f"at_{where}": {**best, "PDL": where} for where in pdl.PDL_TRIGGERS}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="2048x2048,256x2048,5632x2048,2048x5632,32000x2048,4096x4096")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--max-trials", type=int, default=100)
    parser.add_argument("--mixed", action="store_true", help="also time each variant with a torch kernel between the calls")
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    context = gemv_context()
    device, report = context[:2]
    rows = []
    for text in args.shapes.split(","):
        n, k = map(int, text.split("x"))
        for name in ("int8_gemv", "int4_gemv"):
            spec = get_kernel(name)
            shape, sets, best = tuned_gemv(spec, n, k, context, args.runs, args.max_trials)
            cases = variants(best)
            calls = {label: (lambda j, c=c: spec.launch(*sets[j % len(sets)], config=c)) for label, c in cases.items()}
            if args.mixed:  # a non-PDL torch kernel before every call (it reads and writes the call's x)
                calls.update({f"{label}_mixed": (lambda j, c=c: (sets[j % len(sets)][0].add_(0.0), spec.launch(*sets[j % len(sets)], config=c)))
                              for label, c in cases.items()})
            times = dict(zip(calls, head_to_head(list(calls.values()), args.runs, device)))
            rows.append({"kernel": name, "shape": list(shape), "config": best, "ms": times})
            print(name, shape, {label: round(ms * 1e3, 2) for label, ms in times.items()}, flush=True)
            write_result(args.out_file, "agnitra.pdl-trigger/1", report, runs=args.runs,
                         timing="CUDA graphs of 20 calls, inputs rotated past L2, 3 interleaved rounds, median", rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

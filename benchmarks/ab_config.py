"""A GEMV's tuned configuration (int8, int4, or the fused decode-step GEMVs; or the int4 tiled kernel at batch --m) against the same with some keys changed, head to head.

    PYTHONPATH=src python benchmarks/ab_config.py --kernel int8_gemv --shapes 32000x2048,4096x4096 \
        --variant '{"EVICT": true}' --out-file out.json

For each N x K: the tuned configuration (tuning cache; tuned here where missing) and each
--variant (a JSON object merged over it), checked against the float64 reference and timed as
decode runs them (CUDA graphs of 20 calls, inputs rotated past L2, interleaved rounds, median).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from agnitra.kernels.autotune import check, head_to_head, to_float64
from agnitra.kernels.spec import get_kernel
from pdl_trigger import settled_gemv_context, tuned_gemv  # benchmarks/: the tuned GEMV and its inputs, as pdl_trigger.py times them
from result_file import write_result  # benchmarks/


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", choices=("int8_gemv", "int4_gemv", "decode_gemv", "decode_gemv_gated", "int4_tiled"), default="int8_gemv")
    parser.add_argument("--m", type=int, default=1, help="batch rows (int4_tiled: more than 8)")
    parser.add_argument("--shapes", default="2048x2048,256x2048,5632x2048,2048x5632,32000x2048,4096x4096,14336x4096,4096x14336")
    parser.add_argument("--variant", action="append", required=True, help="a JSON object merged over the tuned configuration (repeatable)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--max-trials", type=int, default=100)
    parser.add_argument("--time-failed", action="store_true",
                        help="time the variants that fail the check as well (a decomposition: kernels doing part of the work; listed under failed)")
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    context, settled = settled_gemv_context()
    device, report = context[:2]
    dtype = torch.bfloat16
    spec = get_kernel(args.kernel)
    rows = []
    for text in args.shapes.split(","):
        n, k = map(int, text.split("x"))
        shape, sets, best = tuned_gemv(spec, n, k, context, args.runs, args.max_trials, args.m)
        configs = {"tuned": best, **{variant: {**best, **json.loads(variant)} for variant in args.variant}}
        reference = spec.reference(*to_float64(sets[0]))
        errors = {label: check(spec, c, sets, reference, dtype) for label, c in configs.items()}
        bad = {label: trial.reason for label, trial in errors.items() if not trial.ok}
        timed = {label: c for label, c in configs.items() if label not in bad or (args.time_failed and errors[label].error is not None)}  # ran, wrong
        times = dict(zip(timed, head_to_head([lambda j, c=c: spec.launch(*sets[j % len(sets)], config=c) for c in timed.values()], args.runs, device)))
        rows.append({"shape": list(shape), "config": best, "ms": times, "failed": bad, "relative_error": {label: t.error for label, t in errors.items()}})
        print(args.kernel, shape, {label: round(ms * 1e3, 2) for label, ms in times.items()}, bad or "", flush=True)
        write_result(args.out_file, "agnitra.ab-config/1", report, kernel=args.kernel, runs=args.runs, settled=settled,
                     timing="CUDA graphs of 20 calls, inputs rotated past L2, 3 interleaved rounds, median", rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

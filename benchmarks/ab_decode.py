"""The fused decode-step GEMV's tuned configuration against variants, head to head (as ab_config.py for the plain GEMVs).

    PYTHONPATH=src python benchmarks/ab_decode.py --kernel decode_gemv --shapes 32000x2048 \
        --variant '{"BLOCK_N": 4, "BLOCK_K": 2048, "num_warps": 4}' --out-file out.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import torch

from agnitra.config import load_settings
from agnitra.device import resolve_device
from agnitra.kernels.autotune import cached_config, check, head_to_head, input_sets, to_float64
from agnitra.kernels.spec import get_kernel
from agnitra.kernels.tuning_cache import TuningCache
from agnitra.report.schema import to_dict
from agnitra.telemetry.signature import software_versions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", choices=("decode_gemv", "decode_gemv_gated"), default="decode_gemv")
    parser.add_argument("--shapes", default="32000x2048", help="PxK, comma-separated (batch 1)")
    parser.add_argument("--variant", action="append", required=True, help="a JSON object merged over the tuned configuration (repeatable)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    from agnitra import api

    device = resolve_device("cuda")
    report = api.describe_device(device)
    cache = TuningCache(load_settings().cache_path, report.signature["id"])
    spec, dtype, rows = get_kernel(args.kernel), torch.bfloat16, []
    for text in args.shapes.split(","):
        p, k = map(int, text.split("x"))
        shape = (1, p, k)
        sets = input_sets(spec, shape, dtype, device, report.signature.get("l2_bytes"))
        tuned = cached_config(spec, shape, dtype, cache)
        configs = {"tuned": tuned, **{v: {**tuned, **json.loads(v)} for v in args.variant}}
        reference = spec.reference(*to_float64(sets[0]))
        checked = {label: check(spec, c, sets, reference, dtype) for label, c in configs.items()}
        timed = {label: c for label, c in configs.items() if checked[label].ok}
        times = dict(zip(timed, head_to_head([lambda j, c=c: spec.launch(*sets[j % len(sets)], config=c) for c in timed.values()], args.runs, device)))
        rows.append({"shape": list(shape), "config": tuned, "ms": times, "failed": {label: t.reason for label, t in checked.items() if not t.ok}})
        print(args.kernel, shape, {label: round(ms * 1e3, 2) for label, ms in times.items()}, rows[-1]["failed"] or "", flush=True)
    Path(args.out_file).write_text(json.dumps({"schema": "agnitra.ab-config/1", "date": dt.date.today().isoformat(), "device": to_dict(report), "versions": software_versions(),
                                               "command": " ".join(sys.argv), "kernel": args.kernel, "runs": args.runs,
                                               "timing": "CUDA graphs of 20 calls, inputs rotated past L2, 3 interleaved rounds, median", "rows": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

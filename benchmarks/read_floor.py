"""What only reading a decode GEMV's weight bytes costs on this GPU, with and without PDL.

    PYTHONPATH=src python benchmarks/read_floor.py --sizes 4096x2048,4096x4096,14336x2048 --out-file out.json

For each N x row-bytes buffer (int4 llama-8b 4096x4096 is 4096x2048 bytes, int8 4096x4096): the
fastest read-only Triton kernel of a family (`explore_gemv.read_floor`, rotating copies past L2,
CUDA graphs of 20 calls), launched plainly and with programmatic dependent launch (every read
before the wait, the next pass let in after its loop; `overlap_floor.py` lets it in sooner and goes faster), as a
fraction of the large-buffer copy bandwidth the kernel rows are judged by.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agnitra import api
from agnitra.device import resolve_device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explore_gemv import read_floor  # noqa: E402
from result_file import write_result  # noqa: E402 - benchmarks/


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4096x2048,4096x4096,14336x2048,4096x7168")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    device = resolve_device("cuda")
    report = api.describe_device(device)
    copy_gbps = report.ceilings["copy_gbps"]
    rows = []
    for text in args.sizes.split(","):
        n, row_bytes = map(int, text.split("x"))
        row = {"rows": n, "row_bytes": row_bytes, "bytes": n * row_bytes}
        for pdl in (False, True):
            floor = read_floor(n, row_bytes, device, report.signature.get("l2_bytes"), args.runs, pdl=pdl)
            row["pdl" if pdl else "plain"] = {**floor, "fraction_of_copy": floor["gbps"] / copy_gbps}
        rows.append(row)
        print(text, {k: (round(v["ms"] * 1e3, 2), f"{v['fraction_of_copy']:.0%}") for k, v in row.items() if isinstance(v, dict)}, flush=True)
    write_result(args.out_file, "agnitra.read-floor/1", report, copy_gbps=copy_gbps, runs=args.runs,
                 timing="CUDA graphs of 20 calls, rotating copies past L2, median", rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

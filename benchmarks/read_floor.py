"""What only reading a decode GEMV's weight bytes costs on this GPU, with and without PDL.

    PYTHONPATH=src python benchmarks/read_floor.py --sizes 4096x2048,4096x4096,14336x2048 --out-file out.json

For each N x row-bytes buffer (int4 llama-8b 4096x4096 is 4096x2048 bytes, int8 4096x4096): the
fastest read-only Triton kernel of a family (`read_floor` below, rotating copies past L2,
CUDA graphs of 20 calls), launched plainly and with programmatic dependent launch (every read
before the wait, the next pass let in after its loop; `overlap_floor.py` lets it in sooner and goes faster), as a
fraction of the large-buffer copy bandwidth the kernel rows are judged by.

`ReadPass` and `read_floor` are also what `kernels.py` (each GEMV row's read_floor column),
`overlap_floor.py` and `held_floor.py` time their floors with.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

from agnitra import api
from agnitra.device import resolve_device
from agnitra.kernels.autotune import sets_past_l2
from agnitra.kernels.pdl import PDL_TRIGGERS, pdl_wait
from agnitra.telemetry.timing import time_device_calls

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import write_result  # noqa: E402 - benchmarks/


@triton.jit
def read_span(w_ptr, out_ptr, N, WORDS, SPAN, PRE, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, STAGES: tl.constexpr, PDL: tl.constexpr = 0):
    """Sums BLOCK_N rows over a span of SPAN words (program_id(1) picks the span): PRE words before
    the PDL wait, the rest after it (overlap_floor.py); the floors here read the whole row before it."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ptrs = w_ptr + (rows % N)[:, None].to(tl.int64) * WORDS + tl.program_id(1) * SPAN + tl.arange(0, BLOCK_W)[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.int32)
    for s in tl.range(0, PRE, BLOCK_W, num_stages=STAGES):  # STAGES > 1: loads streamed through shared memory
        acc += tl.load(ptrs + s)
    pdl_wait(PDL)  # weights only above; the next kernel let in right after the wait
    for s in tl.range(PRE, SPAN, BLOCK_W, num_stages=STAGES):
        acc += tl.load(ptrs + s)
    tl.store(out_ptr + tl.program_id(1) * N + rows, tl.sum(acc, axis=1), mask=rows < N)


class ReadPass:
    """The read-only kernel over rotating copies past L2 of an [n, row_bytes] buffer (int32 words)."""

    MAX_SPLIT = 8

    def __init__(self, n: int, row_bytes: int, device, l2_bytes: int | None):
        self.n, self.words, self.device = n, row_bytes // 4, device
        self.copies = sets_past_l2(n * row_bytes, l2_bytes)
        self.bufs = [torch.randint(-2**31, 2**31 - 1, (n, self.words), dtype=torch.int32, device=device) for _ in range(self.copies)]
        self.out = torch.empty(self.MAX_SPLIT * n, dtype=torch.int32, device=device)  # [split, n] row sums

    def launch(self, bn: int, bw: int, nw: int, stages: int, i: int, pdl: bool = False, split: int = 1, pre: int | None = None) -> None:
        """One pass over copy i with BLOCK_N rows, BLOCK_W words a row a step, `split` programs a row
        block (a span of words each), `pre` words of each span read before the PDL wait (default: all);
        pdl: launched with programmatic dependent launch, the next kernel let in at the wait."""
        span = self.words // split
        extra = {"PDL": PDL_TRIGGERS["wait"], "launch_pdl": True} if pdl else {}
        read_span[(-(-self.n // bn), split)](self.bufs[i % self.copies], self.out, self.n, self.words, span, span if pre is None else pre,
                             BLOCK_N=bn, BLOCK_W=bw, STAGES=stages, num_warps=nw, **extra)

    def time(self, bn: int, bw: int, nw: int, stages: int, runs: int, pdl: bool = False, split: int = 1, pre: int | None = None) -> float:
        """Median device ms of one pass (`launch`; raises when it cannot run)."""
        return median_pass_ms(lambda i: self.launch(bn, bw, nw, stages, i, pdl, split, pre), runs, self.device)


def median_pass_ms(launch, runs: int, device) -> float:
    """Median device ms of `launch(i)` (copy i of a pass's inputs) after three warm-up calls, in CUDA graphs of 20 calls."""
    for i in range(3):
        launch(i)
    return float(np.median(time_device_calls(launch, runs, device)))


def read_floor(n: int, row_bytes: int, device, l2_bytes: int | None, runs: int, pdl: bool = False) -> dict:
    """Fastest read-only pass over [n, row_bytes] bytes, as int32 words, over copies past L2: loads
    straight to registers (STAGES 1) or streamed through shared memory (cp.async, STAGES 3 and 5);
    pdl: each pass launched with PDL, every read before its wait, the next pass let in after its loop (not the most a chain overlaps: overlap_floor.py, part of the reads after the wait, goes faster)."""
    reads = ReadPass(n, row_bytes, device, l2_bytes)
    best = None
    for bn in (1, 2, 4, 8, 16):
        for bw in (32, 64, 128, 256, 512, 1024):
            if reads.words % bw or bn * bw > 8192 or bn * bw < 512:
                continue
            for nw, stages in itertools.product((4, 8), (1, 3, 5)):
                try:
                    ms = reads.time(bn, bw, nw, stages, runs, pdl)
                except Exception as exc:  # noqa: BLE001 - out of resources: skip the configuration
                    print("read floor config failed", bn, bw, nw, stages, str(exc).splitlines()[0][:120])
                    continue
                if best is None or ms < best["ms"]:
                    best = {"ms": ms, "BLOCK_N": bn, "BLOCK_W": bw, "num_warps": nw, "STAGES": stages}
    best["gbps"] = n * row_bytes / (best["ms"] / 1e3) / 1e9
    return best


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

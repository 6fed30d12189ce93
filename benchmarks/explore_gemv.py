"""Decode GEMV exploration: every configuration of a kernel variant at llama decode shapes, beside
the time a kernel needs only to READ the same weight bytes, and the peers, in one run.

    PYTHONPATH=src python benchmarks/explore_gemv.py --shapes 8b,1b --out-file results.json

For each shape:
- read floor: the fastest of a family of read-only Triton kernels (each program sums BLOCK_N rows
  of the weight as int32 words) over rotating copies larger than L2. This is what reading those
  bytes costs at that size on this device, launch ramp and tail included; the copy bandwidth of a
  large buffer is the other reference.
- int8 GEMV (`int8_gemv`): every configuration of its space, each checked against the float64
  reference.
- int4 GEMV: the byte kernel with a second split-K launch (before), and every configuration of the
  int4 GEMV's space (at batch 1 the row and word kernels; `--int4-kernels rows` keeps one kind,
  the default configuration is always tried beside it), with the best of each kernel.
- peers in the same process: torch.compile's int8 Linear, tinygemm int4 (`_weight_int4pack_mm`).
Writes one JSON file (all trials, the best of each variant, floors, peers, device, versions).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

from agnitra import api
from agnitra.device import resolve_device
from agnitra.kernels.autotune import head_to_head, input_sets, sets_past_l2, tune
from agnitra.kernels.pdl import PDL_TRIGGERS, pdl_wait
from agnitra.kernels.spec import get_kernel
from agnitra.telemetry.timing import time_device_calls

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels import LLAMA_1B, LLAMA_8B, compiled_int8_peers, int4_peers, peer_calls  # noqa: E402
from result_file import write_result  # noqa: E402 - benchmarks/

GROUP = 128


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


def int4_before(shape) -> list[dict]:
    """The byte kernel with a second split-K launch, as tuned before the word kernel (the "before")."""
    return [{"KERNEL": "bytes", "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": s, "num_warps": 4, "num_stages": 3} for s in (1, 2, 8)]


def explore(name: str, shape, configs: list[dict], dtype, device, l2, runs: int) -> dict:
    spec = dataclasses.replace(get_kernel(name), configs=lambda s, d, c=configs: c)
    result = tune(spec, shape, dtype, device, runs=runs, strategy="exhaustive", cache=None, l2_bytes=l2, max_trials=len(configs))
    trials = sorted(([t.ms, t.config] for t in result.trials if t.ok), key=lambda t: t[0])
    failed = [[t.config, t.reason] for t in result.trials if not t.ok]
    by_kernel = {}
    for ms, config in trials:  # fastest first: the first of each KERNEL is its best
        by_kernel.setdefault(config.get("KERNEL", name), [ms, config])
    return {"best": result.best, "best_ms": result.best_ms, "best_by_kernel": by_kernel, "trials": trials, "tried": len(result.trials), "failed": failed[:10], "failed_count": len(failed)}


def vary(space: list[dict], spec: str) -> list[dict]:
    """`space` crossed with one key's values ("STAGES=1,3": every config once per value; 0 leaves the key unset)."""
    if not spec:
        return space
    key, values = spec.split("=")
    return [{**c, **({key: int(v)} if int(v) else {})} for c in space for v in values.split(",")]


def peer_ms(peers: dict, sets, device, runs: int) -> dict:
    """Each peer's median time, the peers head to head (`kernels.peer_calls`; a peer that cannot run is recorded)."""
    calls, failed = peer_calls(peers, sets)
    return {**dict(zip(calls, head_to_head(list(calls.values()), runs, device))), **failed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default="8b,1b", help="8b, 1b, smoke or NxK (batch 1), comma-separated")
    parser.add_argument("--only", default="floor,int8,int4")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--int4-kernels", default="", help="comma-separated KERNEL values of the int4 space to try (default: all)")
    parser.add_argument("--int4-where", default="", help="keep int4 configs with these values, e.g. PREFETCH=True,VEC=2")
    parser.add_argument("--int4-vary", default="", help="cross the int4 configs with a config key's values, e.g. maxnreg=0,96 or STAGES=1,3 (0: unset)")
    parser.add_argument("--int4-configs", default="", help="a JSON file: the list of int4 configs to try instead of the space (no byte-kernel 'before')")
    parser.add_argument("--int8-vary", default="", help="cross the int8 configs with a config key's values, e.g. STAGES=1,3,4 (0: unset)")
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    device = resolve_device(args.device)
    report = api.describe_device(device)
    l2 = report.signature.get("l2_bytes")
    smoke = args.shapes == "smoke"  # the CPU under TRITON_INTERPRET=1: fp16 (the interpreter's bf16 tl.dot is wrong)
    dtype = torch.float16 if smoke else torch.bfloat16
    only = set(args.only.split(","))
    named = {"8b": LLAMA_8B, "1b": LLAMA_1B, "smoke": [(1, 64, 256)]}
    shapes = [s for key in args.shapes.split(",") for s in named.get(key) or [(1, *map(int, key.split("x")))]]  # or NxK at batch 1
    rows = []
    path = Path(args.out_file)

    def save():
        write_result(path, "agnitra.gemv-explore/1", report, runs=args.runs, copy_gbps=report.ceilings.get("copy_gbps"), rows=rows)

    for shape in shapes:
        m, n, k = shape
        row = {"shape": list(shape)}
        rows.append(row)
        if "floor" in only:
            row["read_floor_int8"] = read_floor(n, k, device, l2, args.runs)
            row["read_floor_int4"] = read_floor(n, k // 2, device, l2, args.runs)
            print(shape, "read floors", row["read_floor_int8"], row["read_floor_int4"], flush=True)
        if "int8" in only:
            sets = input_sets(get_kernel("int8_gemv"), shape, dtype, device, l2)
            row["int8_peers"] = {} if smoke else peer_ms(compiled_int8_peers(), sets, device, args.runs)
            row["int8"] = explore("int8_gemv", shape, vary(get_kernel("int8_gemv").configs(shape, dtype), args.int8_vary), dtype, device, l2, args.runs)
            print(shape, "int8", row["int8"]["best_ms"], row["int8"]["best"], row["int8_peers"], flush=True)
            save()
        if "int4" in only:
            shape4 = (*shape, GROUP)
            spec4 = get_kernel("int4_gemv")
            sets = input_sets(spec4, shape4, dtype, device, l2)
            row["int4_peers"] = {} if smoke else peer_ms(int4_peers(dtype), sets, device, args.runs)
            if args.int4_configs:
                space = json.loads(Path(args.int4_configs).read_text())
            else:
                row["int4_bytes"] = explore("int4_gemv", shape4, int4_before(shape4), dtype, device, l2, args.runs)
                kinds = set(filter(None, args.int4_kernels.split(",")))
                space = [c for c in spec4.configs(shape4, dtype) if not kinds or c["KERNEL"] in kinds]
            where = dict(item.split("=") for item in filter(None, args.int4_where.split(",")))
            space = [c for c in space if all(str(c.get(key)) == value for key, value in where.items())]
            space = vary(space, args.int4_vary)
            row["int4"] = explore("int4_gemv", shape4, space, dtype, device, l2, args.runs)
            print(shape, "int4 bytes", row.get("int4_bytes", {}).get("best_ms"), "space", row["int4"]["best_by_kernel"], row["int4_peers"], flush=True)
        save()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the tensor-core int4 GEMV's time goes: the kernel beside kernels that do only part of its work.

    PYTHONPATH=src python benchmarks/tc_decompose.py --shapes 4096x14336,14336x4096 --out-file tc-decompose.json

For each shape (batch 1, bf16, group 128) and each tensor-core config, over rotating copies past L2:
- `words*`: a kernel with the GEMV's grid, program and warp mapping and loads of the pre-shuffled
  words (`shuffle_int4_for_tc` layout), which only sums them: what reading the words costs in
  this access pattern;
  the variants (`READS`) also load x's B fragments and/or the (scale, zero) pairs as the GEMV does,
  with or without cache hints on the words (L2 only, evict first) and side loads (evict last);
- `gemv`: the tensor-core GEMV itself (its MMAs, dequantisation and split-K fix-up);
- `floor`: the fastest read-only kernel over the same bytes in row-major order (`explore_gemv`).
The differences place the time: access pattern (floor -> words), side loads and cache hints (-> words_x_sz*),
arithmetic and split-K fix-up (-> gemv). No kernel here is used by Agnitra.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

from agnitra import api
from agnitra.kernels import quant_matmul as qm
from agnitra.kernels.autotune import sets_past_l2
from agnitra.telemetry.signature import software_versions
from agnitra.telemetry.timing import time_device_calls

sys.path.insert(0, str(Path(__file__).parent))
from explore_gemv import read_floor  # noqa: E402

GROUP = 128
PLAIN = {"X": False, "SZ": False, "W_CACHE": "", "W_EVICT": "", "SIDE_EVICT": "", "INTERLEAVED": False}
# the read-only variants: which side loads, which cache hints
READS = {
    "words": {},
    "words_x": {"X": True},
    "words_sz": {"SZ": True},
    "words_x_sz": {"X": True, "SZ": True},
    "words_x_sz_wcg": {"X": True, "SZ": True, "W_CACHE": ".cg"},
    "words_x_sz_wfirst": {"X": True, "SZ": True, "W_EVICT": "evict_first"},
    "words_x_sz_wfirst_slast": {"X": True, "SZ": True, "W_EVICT": "evict_first", "SIDE_EVICT": "evict_last"},
    "interleaved": {"INTERLEAVED": True},
    "interleaved_x_sz": {"X": True, "SZ": True, "INTERLEAVED": True},
    "interleaved_x_sz_wfirst_slast": {"X": True, "SZ": True, "W_EVICT": "evict_first", "SIDE_EVICT": "evict_last", "INTERLEAVED": True},
}


def interleave_pairs(words: torch.Tensor, pairs: torch.Tensor, group: int) -> torch.Tensor:
    """words [tiles, K/64, 32, 4], pairs [tiles, K/G, 16] -> [tiles, K/G, G/64 * 128 + 16]: each group's
    words followed by its (s, z) pairs, so that the pairs come from the same DRAM pages as the words."""
    tiles, groups = pairs.shape[0], pairs.shape[1]
    return torch.cat((words.reshape(tiles, groups, (group // 64) * 128), pairs), dim=2).contiguous()


@triton.jit
def _tc_read_kernel(w_ptr, x_ptr, sz_ptr, out_ptr, K, n_tiles, GROUP: tl.constexpr, TILES: tl.constexpr, WARPS: tl.constexpr, CHUNKS: tl.constexpr,
                    SPLIT_K: tl.constexpr, X: tl.constexpr, SZ: tl.constexpr, W_CACHE: tl.constexpr, W_EVICT: tl.constexpr,
                    SIDE_EVICT: tl.constexpr, INTERLEAVED: tl.constexpr):
    """The tensor-core GEMV's loads (words; with X x's B fragments, with SZ the (s, z) pairs), summed;
    W_CACHE / W_EVICT / SIDE_EVICT: the words' cache modifier and the eviction policies. INTERLEAVED:
    w_ptr is `interleave_pairs`' layout, each (tile, group)'s words followed by its 16 (s, z) pairs."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    own = pid_n * TILES + (tl.arange(0, WARPS)[:, None, None] * (TILES // WARPS) + tl.arange(0, TILES // WARPS)[None, :, None])
    tiles = tl.minimum(own, n_tiles - 1)
    e = tl.arange(0, 128)[None, None, :]
    g = e // 16
    t = (e // 4) % 4
    c = e % 4
    ch = tl.arange(0, CHUNKS)[None, None, :, None]
    chunks = K // 64
    CPG: tl.constexpr = GROUP // 64
    GS: tl.constexpr = CPG * 128 + 16  # an interleaved (tile, group): its words, then its (s, z) pairs
    x_ptrs = (x_ptr + (8 * t + c) + 0 * g + 0 * tl.arange(0, WARPS)[:, None, None])[:, :, None, :] + ch * 32
    e64 = tl.arange(0, 64)[None, None, None, :]
    if INTERLEAVED:
        w_ptrs = w_ptr + (tiles * ((K // GROUP) * GS) + e)[:, :, None, :]
        sz_ptrs = w_ptr + tiles[:, :, :, None] * ((K // GROUP) * GS) + CPG * 128 + (2 * (e64 // 8) + e64 % 2)
    else:
        w_ptrs = w_ptr + (tiles * (chunks * 128) + e)[:, :, None, :] + ch * 128
        sz_ptrs = sz_ptr + tiles[:, :, :, None] * ((K // GROUP) * 16) + (2 * (e64 // 8) + e64 % 2)
    acc = tl.zeros((WARPS, TILES // WARPS, CHUNKS, 128), dtype=tl.int32)
    step = SPLIT_K * 64 * CHUNKS
    for k0 in range(pid_k * 64 * CHUNKS, K, step):
        if INTERLEAVED:
            cc = k0 // 64 + ch  # chunk c: (c // CPG) GS + (c % CPG) 128
            acc ^= tl.load(w_ptrs + ((cc // CPG) * GS + (cc % CPG) * 128), cache_modifier=W_CACHE, eviction_policy=W_EVICT)
        else:
            acc ^= tl.load(w_ptrs + (k0 // 64) * 128, cache_modifier=W_CACHE, eviction_policy=W_EVICT)
        if X:
            acc ^= tl.load(x_ptrs + (k0 // 64) * 32, eviction_policy=SIDE_EVICT) ^ tl.load(x_ptrs + ((k0 // 64) * 32 + 4), eviction_policy=SIDE_EVICT)
        if SZ:
            acc ^= tl.sum(tl.load(sz_ptrs + (k0 // GROUP) * (GS if INTERLEAVED else 16), eviction_policy=SIDE_EVICT), axis=3)[:, :, :, None]
    tl.store(out_ptr + pid_n * SPLIT_K + pid_k, tl.sum(tl.sum(tl.sum(tl.sum(acc, axis=3), axis=2), axis=1), axis=0))


def median_us(launch, runs: int, device) -> float:
    for i in range(3):
        launch(i)
    return 1000 * float(np.median(time_device_calls(launch, runs, device)))


def decompose(n: int, k: int, configs: list[dict], device, l2: int | None, runs: int) -> dict:
    copies = sets_past_l2(n * k // 2, l2)
    inputs = [qm._make_int4_inputs((1, n, k, GROUP), torch.bfloat16, device, seed) for seed in range(copies)]
    operands = [qm.int4_tc_operands(w, s, z, GROUP) for _, w, s, z, _, _ in inputs]
    interleaved = [interleave_pairs(words, pairs, GROUP) for words, pairs in operands]
    y = torch.empty((1, n), device=device, dtype=torch.bfloat16)
    row = {"shape": [1, n, k], "copies": copies, "floor_us": 1000 * read_floor(n, k // 2, device, l2, runs)["ms"], "configs": []}
    for cfg in configs:
        tiles, warps, chunks, split = cfg["BLOCK_N"] // 16, cfg["num_warps"], cfg["BLOCK_K"] // 64, cfg["SPLIT_K"]
        grid = (qm._cdiv(qm._cdiv(n, 16), tiles), split)
        out = torch.empty(grid[0] * split, device=device, dtype=torch.int32)
        opts = {"num_warps": warps, "num_stages": 1, **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {})}

        def read(i, flags):
            words, sz = operands[i % copies]
            if flags["INTERLEAVED"]:
                words = sz = interleaved[i % copies]
            x = inputs[i % copies][0].view(torch.int32)
            _tc_read_kernel[grid](words, x, sz, out, k, qm._cdiv(n, 16), GROUP=GROUP, TILES=tiles, WARPS=warps, CHUNKS=chunks, SPLIT_K=split, **flags, **opts)

        def gemv(i, extra=None):
            x, w, s, z, g, _ = inputs[i % copies]
            qm._int4_tc_gemv(x, w, s, z, g, None, y, {"path": "gemv", **cfg, **(extra or {})}, operands=operands[i % copies])

        entry = {"config": cfg, "gemv_us": median_us(gemv, runs, device),
                 }
        for name, flags in READS.items():
            entry[name + "_us"] = median_us(lambda i, f=flags: read(i, {**PLAIN, **f}), runs, device)
        row["configs"].append(entry)
        print(n, k, json.dumps(entry), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="4096x14336,14336x4096,4096x4096,128256x4096", help="NxK, comma-separated (batch 1)")
    parser.add_argument("--configs", default="benchmarks/int4-tc-decompose.json", help="a JSON list of tensor-core configs")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    device = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    configs = json.loads(Path(args.configs).read_text())
    rows = []
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        rows.append(decompose(n, k, configs, device, l2, args.runs))
    result = {"schema": "agnitra.tc-decompose/1", "date": dt.date.today().isoformat(), "device": api.describe_device(device).name,
              "versions": software_versions(), "command": " ".join(sys.argv), "runs": args.runs, "dtype": "bf16", "group": GROUP, "rows": rows}
    Path(args.out_file).write_text(json.dumps(result, indent=1))
    print("wrote", args.out_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

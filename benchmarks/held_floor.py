"""The read floor of a dependent GEMV chain: pre-wait reads held in registers, used only after the wait.

    PYTHONPATH=src python benchmarks/held_floor.py --sizes 4096x2048,14336x2048 --out-file out.json
    PYTHONPATH=src python benchmarks/held_floor.py --sass 16,128,1,4,2 --words 512   # sm_90 SASS, no GPU: loads before the wait
    PYTHONPATH=src python benchmarks/held_floor.py --sizes 4096x2048 --tail-test 64,16,8,4 --tails 0,2,4,8 --out-file out.json

`overlap_floor.py`'s read-only chain sums the words it reads before its PDL wait right away: its
programs get work done while the kernel before them ends. A GEMV cannot: its products need x,
which the kernel before it writes, so what it reads before its wait it can only hold. Here each
program reads HELD steps of its span before the wait into registers (unused until after it), then
after the wait reads x (a fresh copy per call, as the GEMV's activations; a word per word of a row,
a quarter of the bytes of the GEMV's 16-bit x, read from L2 by every row block alike) and combines
every weight word with x's word, the held steps first, then streams the rest of its span. No
arithmetic beyond that: what the GEMV's MMAs and dequantisation cost is not in the floor either. No split-K
fix-up: each split writes its own sums (the fix-up's cost is the GEMV's, not the floor's).
The family crosses row blocks, words a step, splits, warps, cp.async stages after the wait and
HELD (none, one step, about half, all, within a register budget), in CUDA graphs of 20 calls over
rotating copies past L2 with PDL (next kernel let in at the wait). Fractions are of the copy
bandwidth the kernel rows are judged by, counting the weight bytes alone.

--tail-test gives one shape of work a latency-bound end, as a GEMV's split-K fix-up is: TAIL
dependent round trips to L2 after the sums, before the store, against each HELD.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import torch

from agnitra.kernels._triton import tl, triton
from agnitra.kernels.autotune import sets_past_l2
from agnitra.kernels.pdl import PDL_TRIGGERS, pdl_wait

sys.path.insert(0, str(Path(__file__).resolve().parent))  # overlap_floor, read_floor, sass_loop: benchmarks/
from result_file import fraction_of_copy  # noqa: E402 - benchmarks/

OVERLAP_RECORD = Path(__file__).resolve().parent / "results" / "overlap-floor-nvidia-h100-80gb-hbm3-2026-11-22.json"  # the consuming floor's best configs
HELD_REGISTERS = 64  # the most held words a thread (the GEMV's own state needs the rest)


def _read_held(w_ptr, x_ptr, out_ptr, N, WORDS: tl.constexpr, SPAN: tl.constexpr, HELD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr,
              STAGES: tl.constexpr, PDL: tl.constexpr = 0, TAIL: tl.constexpr = 0, chase_ptr=None):
    """Rows [BLOCK_N] of w over span program_id(1): HELD steps of BLOCK_W words read before the PDL
    wait and held; after it, each word xor-ed with x's word of its column and summed a row. TAIL > 0:
    then TAIL dependent reads of `chase_ptr` (zeros, L2-resident, each address from the last value read:
    round trips one after another, as a split-K fix-up's) before the store, their value added (zero)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    start = tl.program_id(1) * SPAN
    cols = start + tl.arange(0, BLOCK_W)[None, :]
    w_ptrs = w_ptr + (rows % N)[:, None].to(tl.int64) * WORDS + cols
    held = ()
    for i in tl.static_range(HELD):
        held = held + (tl.load(w_ptrs + i * BLOCK_W),)
    pdl_wait(PDL)  # x next: the previous kernel writes it
    acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.int32)
    for i in tl.static_range(HELD):
        acc += held[i] ^ tl.load(x_ptr + cols + i * BLOCK_W)
    for s in tl.range(HELD * BLOCK_W, SPAN, BLOCK_W, num_stages=STAGES):
        acc += tl.load(w_ptrs + s) ^ tl.load(x_ptr + cols + s)
    total = tl.sum(acc, axis=1)
    if TAIL:
        link = (total == 0x7FFFFFFF).to(tl.int32)  # 0 in practice, but known only once the sums are: the chain starts after them
        for _ in tl.static_range(TAIL):
            link = tl.load(chase_ptr + link, cache_modifier=".cg")  # L2, not L1: a round trip each
        total += link
    tl.store(out_ptr + tl.program_id(1) * N + rows, total, mask=rows < N)


read_held = triton.jit(_read_held)  # launched; `sass_loop.compile_sass` takes the plain `_read_held`


class HeldPass:
    """`read_held` over rotating copies past L2 of an [n, row_bytes] buffer (int32 words) and its x."""

    def __init__(self, n: int, row_bytes: int, device, l2_bytes: int | None, max_split: int):
        self.n, self.words, self.device = n, row_bytes // 4, device
        self.copies = sets_past_l2(n * row_bytes, l2_bytes)
        self.bufs = [torch.randint(-2**31, 2**31 - 1, (n, self.words), dtype=torch.int32, device=device) for _ in range(self.copies)]
        self.xs = [torch.randint(-2**31, 2**31 - 1, (self.words,), dtype=torch.int32, device=device) for _ in range(self.copies)]
        self.out = torch.empty(max_split * n, dtype=torch.int32, device=device)  # [split, n] row sums
        self.chase = torch.zeros(2, dtype=torch.int32, device=device)  # TAIL's chain: every link leads to word 0

    def launch(self, cfg: dict, i: int, pdl: bool = True) -> None:
        split = cfg["SPLIT"]
        extra = {"PDL": PDL_TRIGGERS["wait"], "launch_pdl": True} if pdl else {}
        read_held[(-(-self.n // cfg["BLOCK_N"]), split)](self.bufs[i % self.copies], self.xs[i % self.copies], self.out, self.n, self.words,
                                                          self.words // split, cfg["HELD"], BLOCK_N=cfg["BLOCK_N"], BLOCK_W=cfg["BLOCK_W"],
                                                          STAGES=cfg["STAGES"], num_warps=cfg["num_warps"], TAIL=cfg.get("TAIL", 0), chase_ptr=self.chase, **extra)

    def check(self, cfg: dict) -> bool:
        """The splits' sums of copy 0 equal torch's (int32 wrapping as the kernel's adds do), launched as it
        is timed: with PDL on a GPU (the interpreter runs no PTX: without)."""
        self.launch(cfg, 0, pdl=self.device.type == "cuda")
        got = self.out[: cfg["SPLIT"] * self.n].view(cfg["SPLIT"], self.n).to(torch.int64).sum(dim=0).to(torch.int32)
        want = (self.bufs[0] ^ self.xs[0][None, :]).sum(dim=1, dtype=torch.int64).to(torch.int32)
        return bool(torch.equal(got, want))

    def time(self, cfg: dict, runs: int, pdl: bool = True) -> float:
        from read_floor import median_pass_ms

        return median_pass_ms(lambda i: self.launch(cfg, i, pdl), runs, self.device)


def held_steps(steps: int) -> list[int]:
    """HELD values tried for a span of `steps` steps: none, one, about half, all."""
    return sorted({0, min(1, steps), steps // 2, steps})


def family(words: int, splits=(1, 2, 4, 8), warps=(4, 8), stages=(1, 3), blocks=((4, 8, 16), (64, 128, 256)), tile=(512, 4096)) -> list[dict]:
    """Configs over row blocks x words a step (`blocks`, their product within `tile`), splits, warps, stages and HELD."""
    out = []
    for bn, bw, split, nw, st in itertools.product(*blocks, splits, warps, stages):
        span = words // split
        if words % split or span % bw or not tile[0] <= bn * bw <= tile[1]:
            continue
        steps = span // bw
        for held in held_steps(steps):
            if held * bn * bw > HELD_REGISTERS * 32 * nw or (st > 1 and steps - held < 2):
                continue
            out.append({"BLOCK_N": bn, "BLOCK_W": bw, "SPLIT": split, "num_warps": nw, "STAGES": st, "HELD": held, "steps": steps})
    return out


def consuming_floor(n: int, row_bytes: int, device, l2_bytes, runs: int, copy_gbps: float, record: Path) -> dict:
    """overlap_floor.py's best configurations at this size (from its committed file `record`), timed again
    in this run: the read-only chain that sums its pre-wait reads at once, beside the held one."""
    from read_floor import ReadPass

    rows = [r for r in json.loads(record.read_text())["rows"] if (r["rows"], r["row_bytes"]) == (n, row_bytes)] if record.exists() else []
    if not rows:
        return {}
    reads = ReadPass(n, row_bytes, device, l2_bytes)
    out = {}
    for part, cfg in rows[0]["best_by_part"].items():
        ms = reads.time(cfg["BLOCK_N"], cfg["BLOCK_W"], cfg["num_warps"], cfg["STAGES"], runs, True, cfg["SPLIT"], cfg["PRE"])
        out[part] = {**{k: cfg[k] for k in ("BLOCK_N", "BLOCK_W", "SPLIT", "num_warps", "STAGES", "PRE")}, "ms": ms,
                     "fraction_of_copy": fraction_of_copy(n * row_bytes, ms, copy_gbps)}
    return out


# the tensor-core int4 GEMV's own shapes of work, in words: a 16-row tile a warp (or tiles split over warps),
# 16 words (128 features) a tile a step on a warp: BLOCK_N 16-128, BLOCK_W 16-32, 1-8 warps, splits 1-16
GEMV_LIKE = {"blocks": ((16, 32, 64, 128), (16, 32)), "warps": (1, 2, 4, 8), "splits": (1, 2, 4, 8, 16), "stages": (1,), "tile": (256, 4096)}


def explore(n: int, row_bytes: int, device, l2_bytes, runs: int, copy_gbps: float, sms: int, gemv_like: bool = False) -> dict:
    from overlap_floor import time_family

    passes = HeldPass(n, row_bytes, device, l2_bytes, max_split=16)
    configs = family(passes.words, **GEMV_LIKE) if gemv_like else family(passes.words)
    trials, failed = time_family(configs, passes.check, lambda cfg: passes.time(cfg, runs), n, row_bytes, copy_gbps, sms)
    best = {}
    for label, keep in (("none", lambda t: t["HELD"] == 0), ("some", lambda t: 0 < t["HELD"] < t["steps"]), ("all", lambda t: t["HELD"] == t["steps"])):
        mine = [t for t in trials if keep(t)]
        if mine:
            top = dict(mine[0])
            top["ms_without_pdl"] = passes.time(top, runs, pdl=False)
            best[label] = top
    return {"rows": n, "row_bytes": row_bytes, "bytes": n * row_bytes, "copies": passes.copies, "best_by_held": best,
            "consuming_floor": consuming_floor(n, row_bytes, device, l2_bytes, runs, copy_gbps, OVERLAP_RECORD),
            "top": trials[:20], "all": [[t["BLOCK_N"], t["BLOCK_W"], t["SPLIT"], t["num_warps"], t["STAGES"], t["HELD"], t["steps"], round(t["ms"] * 1e3, 3)] for t in trials],
            "all_columns": ["BLOCK_N", "BLOCK_W", "SPLIT", "num_warps", "STAGES", "HELD", "steps", "us"], "tried": len(trials), "failed": failed[:10],
            "failed_count": len(failed)}


def tail_test(n: int, row_bytes: int, device, l2_bytes, runs: int, copy_gbps: float, shape: str, tails: tuple[int, ...], rounds: int = 3) -> dict:
    """One shape of work ("BLOCK_N,BLOCK_W,SPLIT,warps") with each HELD (none, one step, about half, all) and
    TAIL (dependent L2 round trips after the sums, before the store, as a split-K fix-up's): does reading
    more before the wait still pay when the kernel's end is latency-bound? Medians over interleaved rounds."""

    bn, bw, split, nw = map(int, shape.split(","))
    passes = HeldPass(n, row_bytes, device, l2_bytes, max_split=split)
    steps = passes.words // split // bw
    configs = [{"BLOCK_N": bn, "BLOCK_W": bw, "SPLIT": split, "num_warps": nw, "STAGES": 1, "HELD": held, "TAIL": tail, "steps": steps}
               for tail in tails for held in held_steps(steps)]
    bad = [cfg for cfg in configs if not passes.check(cfg)]
    if bad:
        raise SystemExit(f"wrong sums: {bad}")
    times = [[passes.time(cfg, runs) for cfg in configs] for _ in range(rounds)]  # interleaved rounds
    medians = [float(np.median(column)) for column in zip(*times)]
    rows = [{**cfg, "ms": ms, "fraction_of_copy": fraction_of_copy(n * row_bytes, ms, copy_gbps)} for cfg, ms in zip(configs, medians)]
    return {"rows": n, "row_bytes": row_bytes, "bytes": n * row_bytes, "copies": passes.copies, "shape_of_work": shape, "rounds": rounds, "trials": rows}


def show_tails(text: str, row: dict) -> None:
    for t in row["trials"]:
        print(text, "TAIL", t["TAIL"], "HELD", t["HELD"], "of", t["steps"], round(t["ms"] * 1e3, 2), "us", f"{t['fraction_of_copy']:.1%}", flush=True)


def show_held(text: str, row: dict) -> None:
    from overlap_floor import show_best

    show_best(text, row["best_by_held"], ("BLOCK_N", "BLOCK_W", "SPLIT", "num_warps", "STAGES", "HELD", "steps", "programs_per_sm"))
    for part, top in row["consuming_floor"].items():
        print(text, "consuming", part, round(top["ms"] * 1e3, 2), "us", f"{top['fraction_of_copy']:.1%}", flush=True)


def sass_check(spec: str, words: int) -> dict:
    """Offline (sm_90, the installed Triton): where the held loads sit against the PDL wait."""
    from sass_loop import compile_sass, pdl_order, spill_count

    bn, bw, split, held, nw = map(int, spec.split(","))
    types = {"w_ptr": "*i32", "x_ptr": "*i32", "out_ptr": "*i32", "N": "i32"}
    consts = {"WORDS": words, "SPAN": words // split, "HELD": held, "BLOCK_N": bn, "BLOCK_W": bw, "STAGES": 1, "PDL": PDL_TRIGGERS["wait"]}
    sass, registers = compile_sass(_read_held, types, consts, nw)
    order = pdl_order(sass)
    return {"config": spec, "registers": registers, "spills": spill_count(sass), "loads_before_wait": len(order["loads_before_wait"]), "waits": order["waits"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4096x2048,14336x2048,4096x7168,4096x4096", help="rows x row bytes: the int4 4096^2, 14336x4096, 4096x14336 and int8 4096^2 weights")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out-file")
    parser.add_argument("--gemv-like", action="store_true", help="the family of the tensor-core GEMV's shapes of work (GEMV_LIKE) instead")
    parser.add_argument("--sass", help="BLOCK_N,BLOCK_W,SPLIT,HELD,warps: print the compiled kernel's loads before its wait and stop")
    parser.add_argument("--words", type=int, default=512, help="with --sass: words a row")
    parser.add_argument("--tail-test", metavar="BLOCK_N,BLOCK_W,SPLIT,warps", help="one shape of work, HELD against TAIL dependent L2 round trips at its end (`tail_test`)")
    parser.add_argument("--tails", default="0,2,4,8", help="with --tail-test: the TAIL values")
    args = parser.parse_args()
    if args.sass:
        print(json.dumps(sass_check(args.sass, args.words)))
        return 0
    from overlap_floor import floor_rows

    if args.tail_test:
        tails = tuple(int(t) for t in args.tails.split(","))
        floor_rows(args.sizes, lambda n, row_bytes, device, l2, copy_gbps, sms: tail_test(n, row_bytes, device, l2, args.runs, copy_gbps, args.tail_test, tails),
                   show_tails, args.out_file, "agnitra.held-floor-tail/1",
                   "CUDA graphs of 20 calls, rotating copies (weights and x) past L2, PDL (trigger at the wait), median of 3 interleaved rounds", args.runs)
        return 0

    floor_rows(args.sizes, lambda n, row_bytes, device, l2, copy_gbps, sms: explore(n, row_bytes, device, l2, args.runs, copy_gbps, sms, args.gemv_like),
               show_held, args.out_file, "agnitra.held-floor/1",
               "CUDA graphs of 20 calls, rotating copies (weights and x) past L2, median, PDL (trigger at the wait)", args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

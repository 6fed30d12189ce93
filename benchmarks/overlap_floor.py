"""Does a chain of PDL-launched GEMVs overlap? The read-only floor with part of its reads after the wait.

    PYTHONPATH=src python benchmarks/overlap_floor.py --sizes 4096x2048,4096x4096,14336x2048 --out-file out.json

`read_floor.py` times read-only kernels that read everything BEFORE their PDL wait and let the next
kernel in right after it: the next kernel then starts when this one has nothing left to read, so a
chain of them barely overlaps. Here each program reads a span of its rows (SPLIT programs a row
block), PRE words of it before the wait and the rest after, so the next kernel in the chain, let in
at the wait, can read while this one still reads. The family crosses block shapes, splits (grids
from under one program an SM to several), warps, cp.async stages and the part read before the wait
(none, about half, all), every configuration in CUDA graphs of 20 calls over rotating copies past L2,
with PDL; the best of each part is also timed without PDL. Fractions are of the large-buffer copy
bandwidth the kernel rows are judged by.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

from agnitra import api
from agnitra.device import resolve_device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_floor import ReadPass  # noqa: E402 - the read-only kernel and its buffers
from result_file import fraction_of_copy, write_result  # noqa: E402 - benchmarks/

PARTS = ("none", "half", "all")  # how much of a program's span it reads before its wait


def check(reads: ReadPass, cfg: dict) -> bool:
    """The pass's row sums (its splits added) equal torch's, int32 wrapping as the kernel's adds do; launched
    as it is timed, with PDL, on a GPU."""
    reads.launch(cfg["BLOCK_N"], cfg["BLOCK_W"], cfg["num_warps"], cfg["STAGES"], 0, reads.device.type == "cuda", cfg["SPLIT"], cfg["PRE"])
    got = reads.out[: cfg["SPLIT"] * reads.n].view(cfg["SPLIT"], reads.n).to(torch.int64).sum(dim=0).to(torch.int32)
    return bool(torch.equal(got, reads.bufs[0].sum(dim=1, dtype=torch.int64).to(torch.int32)))


def time_pass(reads: ReadPass, cfg: dict, runs: int, pdl: bool) -> float:
    return reads.time(cfg["BLOCK_N"], cfg["BLOCK_W"], cfg["num_warps"], cfg["STAGES"], runs, pdl, cfg["SPLIT"], cfg["PRE"])


def family(words: int) -> list[dict]:
    out = []
    for bn, bw, split, warps, stages, part in itertools.product((2, 4, 8, 16), (64, 128, 256, 512), (1, 2, 4, 8), (4, 8), (1, 3), PARTS):  # split <= ReadPass.MAX_SPLIT
        span = words // split
        if words % split or span % bw or not 512 <= bn * bw <= 4096:
            continue
        steps = span // bw
        pre = {"none": 0, "half": steps // 2, "all": steps}[part] * bw
        if part == "half" and steps < 2:
            continue
        out.append({"BLOCK_N": bn, "BLOCK_W": bw, "SPLIT": split, "num_warps": warps, "STAGES": stages, "part": part, "PRE": pre})
    return out


def time_family(configs: list[dict], check, time_pdl, n: int, row_bytes: int, copy_gbps: float, sms: int) -> tuple[list[dict], list[dict]]:
    """(trials fastest first, failures) of a floor's configs over [n, row_bytes] bytes: each checked
    (`check(cfg)`), then timed under PDL (`time_pdl(cfg)`, ms); a config that cannot run is recorded."""
    trials, failed = [], []
    for cfg in configs:
        try:
            if not check(cfg):
                failed.append({**cfg, "reason": "wrong sums"})
                continue
            ms = time_pdl(cfg)
        except Exception as exc:  # noqa: BLE001 - out of resources: recorded, skipped
            failed.append({**cfg, "reason": str(exc).splitlines()[0][:160]})
            continue
        programs = -(-n // cfg["BLOCK_N"]) * cfg["SPLIT"]
        trials.append({**cfg, "ms": ms, "programs": programs, "programs_per_sm": round(programs / sms, 2),
                       "fraction_of_copy": fraction_of_copy(n * row_bytes, ms, copy_gbps)})
    trials.sort(key=lambda t: t["ms"])
    return trials, failed


def explore(n: int, row_bytes: int, device, l2_bytes, runs: int, copy_gbps: float, sms: int) -> dict:
    reads = ReadPass(n, row_bytes, device, l2_bytes)
    trials, failed = time_family(family(reads.words), lambda cfg: check(reads, cfg), lambda cfg: time_pass(reads, cfg, runs, pdl=True), n, row_bytes, copy_gbps, sms)
    best = {}
    for part in PARTS:
        mine = [t for t in trials if t["part"] == part]
        if mine:
            top = dict(mine[0])
            top["ms_without_pdl"] = time_pass(reads, top, runs, pdl=False)
            best[part] = top
    return {"rows": n, "row_bytes": row_bytes, "bytes": n * row_bytes, "copies": reads.copies, "best_by_part": best,
            "top": trials[:15], "tried": len(trials), "failed": failed[:10], "failed_count": len(failed)}


def floor_rows(sizes: str, explore_size, show, out_file: str, schema: str, timing: str, runs: int) -> None:
    """Each size ("rows x row bytes", comma-separated) explored on the GPU (`explore_size(n, row_bytes,
    device, l2_bytes, copy_gbps, sms)` -> row), printed (`show(size, row)`) and the file rewritten after
    every size: a killed run keeps what it measured."""
    device = resolve_device("cuda")
    report = api.describe_device(device)
    copy_gbps = report.ceilings["copy_gbps"]
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    rows = []
    for text in sizes.split(","):
        n, row_bytes = map(int, text.split("x"))
        rows.append(explore_size(n, row_bytes, device, report.signature.get("l2_bytes"), copy_gbps, sms))
        show(text, rows[-1])
        write_result(out_file, schema, report, copy_gbps=copy_gbps, runs=runs, timing=timing, rows=rows)


def show_best(text: str, best: dict, keys: tuple[str, ...]) -> None:
    """Print each label's fastest config of a floor at size `text`: its time with and without PDL, its fraction of copy, its `keys`."""
    for label, top in best.items():
        print(text, label, round(top["ms"] * 1e3, 2), "us", f"{top['fraction_of_copy']:.1%}", "without PDL", round(top["ms_without_pdl"] * 1e3, 2),
              {k: top[k] for k in keys}, flush=True)


def show_parts(text: str, row: dict) -> None:
    show_best(text, row["best_by_part"], ("BLOCK_N", "BLOCK_W", "SPLIT", "num_warps", "STAGES", "programs_per_sm"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4096x2048,4096x4096,14336x2048")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    floor_rows(args.sizes, lambda n, row_bytes, device, l2, copy_gbps, sms: explore(n, row_bytes, device, l2, args.runs, copy_gbps, sms), show_parts,
               args.out_file, "agnitra.overlap-floor/1", "CUDA graphs of 20 calls, rotating copies past L2, median, PDL (trigger at the wait)", args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

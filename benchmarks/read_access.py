"""How fast a weight-sized buffer can be READ, by the bytes each row gets per loop step.

    PYTHONPATH=src python benchmarks/read_access.py --shapes 128256x2048,14336x2048 --out-file r.json

A decode GEMV reads each weight row in pieces, one piece a loop step; the int4 kernels took one
quantization group a step (64 bytes of a row at group 128). This times the read-only kernel of
explore_gemv.py (each program sums BLOCK_N rows as int32 words, BLOCK_W words a row a step) over
rotating copies past L2, for pieces of 64 B to the whole row, to see whether the piece size alone
limits the rate. Shapes are ROWSxROW_BYTES. Writes one JSON file: every configuration's time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from pathlib import Path

import torch

from agnitra.device import resolve_device
from agnitra.telemetry.signature import software_versions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explore_gemv import ReadPass  # noqa: E402


def sweep(n: int, row_bytes: int, device, l2_bytes: int | None, runs: int) -> list[dict]:
    reads = ReadPass(n, row_bytes, device, l2_bytes)
    rows = []
    for bw in (16, 32, 64, 128, 256, 512):
        if reads.words % bw:
            continue
        for per_step in (1024, 2048, 4096):  # words a program loads a step
            bn = per_step // bw
            for nw, stages in itertools.product((2, 4, 8), (1, 3)):
                row = {"piece_bytes": bw * 4, "BLOCK_N": bn, "BLOCK_W": bw, "num_warps": nw, "STAGES": stages}
                try:
                    ms = reads.time(bn, bw, nw, stages, runs)
                except Exception as exc:  # noqa: BLE001 - out of resources: recorded, not fatal
                    rows.append({**row, "failed": str(exc).splitlines()[0][:160]})
                    continue
                rows.append({**row, "ms": ms, "gbps": n * row_bytes / (ms / 1e3) / 1e9})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="128256x2048,14336x2048")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args(argv)
    device = resolve_device("cuda")
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    result = {"schema": "agnitra.read_access/1", "date": dt.date.today().isoformat(), "device": torch.cuda.get_device_name(device),
              "versions": software_versions(), "command": " ".join(sys.argv), "timing": f"CUDA graphs of 20 calls, median of {args.runs} replays, copies past L2",
              "shapes": []}
    for text in args.shapes.split(","):
        n, row_bytes = (int(v) for v in text.split("x"))
        rows = sweep(n, row_bytes, device, l2, args.runs)
        best = {}
        for r in rows:
            if "ms" in r and (r["piece_bytes"] not in best or r["ms"] < best[r["piece_bytes"]]["ms"]):
                best[r["piece_bytes"]] = r
        for piece, r in sorted(best.items()):
            print(f"{n}x{row_bytes}B  piece {piece:5d} B: best {r['ms'] * 1e3:7.1f} us  {r['gbps']:6.0f} GB/s  ({r})", flush=True)
        result["shapes"].append({"rows": n, "row_bytes": row_bytes, "best_by_piece": {str(k): v for k, v in sorted(best.items())}, "configs": rows})
    Path(args.out_file).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

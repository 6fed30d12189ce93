"""Inductor's own int8 weight-only GEMV at decode shapes: its Triton source and the configuration
its coordinate descent picked, to compare with Agnitra's int8 GEMV (same harness as kernels.py).

    PYTHONPATH=src python benchmarks/inductor_source.py --shapes 32000x2048,256x2048 --out-dir DIR

Writes DIR/inductor-int8-<N>x<K>.py (the generated kernels, the chosen launch config beside each)
and prints them; needs a GPU (Inductor generates Triton only for CUDA).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from kernels import fresh_int8_peer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="32000x2048,256x2048")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for key in args.shapes.split(","):
        n, k = map(int, key.split("x"))
        compiled, cache = fresh_int8_peer()  # the peer kernels.py times; its cache holds only this shape's kernels
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
        s = torch.rand(n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            compiled(x, w, s)
        torch.cuda.synchronize()
        parts = []
        for src in sorted(cache.rglob("*.py")):
            text = src.read_text()
            if "@triton.jit" in text and "triton_heuristics" in text:
                best = [json.loads(b.read_text()) for b in src.parent.glob("*.best_config")]
                parts.append(f"# {src.name}\n# chosen configs: {json.dumps(best)}\n{text}")
        target = out / f"inductor-int8-{n}x{k}.py"
        target.write_text("\n\n".join(parts))
        print(f"== {target.name}: {len(parts)} kernel file(s)")
        print("\n".join(parts)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())

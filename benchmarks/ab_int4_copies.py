"""Decode with int4 weights kept once (the tensor-core words) against the same recipe keeping both
copies (packed bytes and words, as before the one-copy change), interleaved in one process.

    PYTHONPATH=src python benchmarks/ab_int4_copies.py --workload zoo:llama-1b --out-file out.json

Both variants run `triton-kernels(weights=int4, decode=false) + compile(mode=reduce-overhead)`;
"both copies" builds its int4 layers as if every layer's batch-1 GEMV read the packed bytes. The
result file is the bench report (per-token latency, prefill, each variant's weight bytes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from unittest import mock

from agnitra import api
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.kernels import modules as km
from agnitra.transforms.recipe import Recipe

RECIPE = "triton-kernels(weights=int4,decode=false) + compile(mode=reduce-overhead)"


class BothCopies(RecipeVariant):
    """The recipe with each int4 layer keeping its packed bytes beside the words."""

    def prepare(self, workload, device):
        with mock.patch.object(km, "_batch1_reads_packed", lambda *args: True):
            return super().prepare(workload, device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="zoo:llama-1b")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--recipe", default=RECIPE, help="the recipe both variants run (its int4 step decides the copies)")
    parser.add_argument("--both-first", action="store_true", help="the both-copies variant first (the reference of the correctness check)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--size", default="full", help="the zoo's build size (tiny: a quick check on the CPU)")
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    recipe = Recipe.parse(args.recipe)
    pair = [RecipeVariant(recipe, name="int4 one copy"), BothCopies(recipe, name="int4 both copies")]
    variants = [*(pair[::-1] if args.both_first else pair), "compile-reduce-overhead"]
    report = api.benchmark(args.workload, device=args.device, dtype=args.dtype, seq_len=args.seq_len, tokens=args.tokens, runs=args.runs, variants=variants,
                           op_breakdown=False, size=args.size)
    doc = {**report.to_dict(), "command": " ".join(["benchmarks/ab_int4_copies.py", *sys.argv[1:]]), "recipe": args.recipe}
    Path(args.out_file).write_text(json.dumps(doc, indent=1))
    for v in report.variants:
        decode = v.decode
        print(f"{v.name}: {v.status} {v.reason} per-token {v.latency_ms.median if v.latency_ms else None} ms, prefill {decode.prefill_ms if decode else None} ms,"
              f" weights {(v.model_bytes or 0) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""tinylm-py, the decoder trained on real text: its training record, and what each recipe does
to held-out perplexity and decode speed, against torch.compile in the same interleaved run.

    PYTHONPATH=src python benchmarks/trained.py --size small --device cpu
    PYTHONPATH=src python benchmarks/trained.py --size large --device cuda --train   # trains first (~4 min, H100)

Writes benchmarks/results/trained-tinylm-py-<size>-<device>-<date>.json (`agnitra.trained-bench/1`):
the training record (steps, tokens, held-out and unigram perplexity, corpus fingerprints) and
the bench report (baseline, peers and recipes, each with its held-out perplexity change, logit
SQNR, KL and next-token agreement, and its decode speed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

from result_file import write_result  # benchmarks/

from agnitra import api
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.device import resolve_device
from agnitra.results import to_dict
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.zoo.tinylm_py import checkpoint

CPU_VARIANTS = ["eager", "compile"]
CPU_RECIPES = ["int8-weight-only", "int4-weight-only", "precision(dtype=bf16) + int8-weight-only + compile"]
GPU_VARIANTS = ["eager", "compile-reduce-overhead"]
GPU_RECIPES = ["int8-weight-only + compile(mode=reduce-overhead)", "int4-weight-only + compile(mode=reduce-overhead)",
               "triton-kernels(weights=int8) + compile(mode=reduce-overhead)"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["small", "large"], default="small")
    parser.add_argument("--device", default=None)
    parser.add_argument("--train", action="store_true", help="train (and cache) the model first")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out-file", default=None)
    args = parser.parse_args()
    device = resolve_device(args.device)
    t0 = time.perf_counter()
    if args.train:
        _, record = api.zoo_build("tinylm-py", size=args.size, device=device, progress=lambda m, f: print(f"  [{time.perf_counter() - t0:6.1f}s] {m}", flush=True))
        print(f"trained: held-out perplexity {record['heldout_perplexity']} (unigram {record['unigram_perplexity']}) in {record['train_s']} s", flush=True)
    cuda = device.type == "cuda"
    recipes = GPU_RECIPES if cuda else CPU_RECIPES
    variants = [*(GPU_VARIANTS if cuda else CPU_VARIANTS), *[RecipeVariant(Recipe.parse(r)) for r in recipes]]
    report = api.benchmark("zoo:tinylm-py", variants=variants, device=device, size=args.size, runs=args.runs, warmup=1, op_breakdown=False)
    record = json.loads(checkpoint(args.size).with_suffix(".json").read_text())
    rows = [{"variant": v.name, "status": v.status, "reason": v.reason, "tokens_per_s": v.decode.tokens_per_s if v.decode else None,
             "ms_per_token": v.latency_ms.median if v.latency_ms else None, "perplexity_change": v.correctness.value if v.correctness else None,
             "perplexity": (v.correctness.details.get("perplexity") if v.correctness else None), "passed": v.correctness.passed if v.correctness else None,
             "sqnr_db": v.correctness.details.get("sqnr_db") if v.correctness else None,
             "token_agreement": v.correctness.details.get("token_agreement") if v.correctness else None} for v in report.variants]
    for row in rows:
        print(row, flush=True)
    slug = "".join(ch if ch.isalnum() else "-" for ch in report.device.name.lower()).strip("-")
    path = Path(args.out_file or f"benchmarks/results/trained-tinylm-py-{args.size}-{slug}-{dt.date.today().isoformat()}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_result(path, "agnitra.trained-bench/1", report.device, size=args.size, training=record, rows=rows, bench=to_dict(report))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does a search's screening run time a recipe as the final run does?

The search screens each candidate in a short interleaved run against the baseline (the tuner's
`screening_run`: warm-up 3, 20 calls; 30 in the run of 2026-11-26); the final run measures the finalists and peers together
(warm-up 5, 50 calls). Both are meant to be the same measurement. On a held-out mistral (H200)
the screening run timed compile(reduce-overhead) at 0.40 ms and the final run at 0.234 ms: every
recipe with CUDA graphs was misranked in the search.

For each workload and recipe this measures, in one process as the search's worker does:

- the screening run as it was (20 calls, 2 a round: half the samples start on an idle device),
- the screening run as it is (`bench.harness.CALLS_A_ROUND` calls a round),
- one final run of all the recipes together,

and writes each recipe's screening median over its final median (1.0: they agree).

Measured on an H100 (screen-agreement-nvidia-h100-80gb-hbm3-2026-11-26.json), mistral and
whisper-encoder at size moderate, fp16: the calls a round were not the cause. Device-bound
cuda-graphs agrees within 3% either way; compile(reduce-overhead) and plain compile screen at
0.44-0.95 of their final medians, before and after alike; and the eager baseline itself moved
from 2.2 to 6.7 ms between runs of one process, so a host-bound baseline's state, not the
candidate, sets much of a screened speedup. Next: the baseline's spread between runs (Inductor's
compile workers still busy, clocks, the Python heap) on the GPU.

    PYTHONPATH=src python benchmarks/screen_agreement.py --device cuda --dtype fp16 \
        --workloads hf:mistral,hf:whisper-encoder --out-file /tmp/out/screen-agreement.json

Workloads: hf:FAMILY (benchmarks/hf_families.py at size moderate) or any spec `agnitra bench` takes,
with @bN for batch N (gen:tfm-d512-l4-h8@b1). --final-only: the final run alone, the recipes against
each other.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

BEFORE_RUNS = 20  # the screening run's calls as it was
RECIPES = [
    "compile(mode=reduce-overhead, pdl=true, coordinate_descent=true)",
    "compile(mode=reduce-overhead, freezing=true, pdl=true, coordinate_descent=true)",
    "cuda-graphs",
    "compile",
]


def _workload(spec: str, device, dtype: str | None):
    from agnitra.workloads.prepare import prepare_workload

    if spec.startswith("hf:"):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from hf_families import build

        return prepare_workload(build(spec[3:], "moderate"), device=device, dtype=dtype)[0]
    name, _, batch = spec.partition("@b")  # gen:tfm-d512-l4-h8@b1: that batch
    return prepare_workload(name, device=device, dtype=dtype, batch=int(batch) if batch else None)[0]


def _median(report, name: str) -> dict:
    v = next(v for v in report.variants if v.name == name)
    if v.status != "ok":
        return {"status": v.status, "reason": (v.reason or "")[:160]}
    return {"status": "ok", "median_ms": v.latency_ms.median, "p95_ms": v.latency_ms.p95, "rounds": len(v.round_ms or [])}


def measure(spec: str, device, dtype: str | None, recipes: list[str], before_calls: int, final_only: bool = False) -> dict:
    """Screening (as it was, as it is) and final medians of each recipe on one workload (the final
    run's alone with `final_only`: recipes compared with each other and the peers)."""
    from agnitra import api
    from agnitra.bench.harness import CALLS_A_ROUND, BenchConfig, Harness
    from agnitra.bench.variants.eager import Eager
    from agnitra.search.tuner import SearchConfig, free_candidate

    workload = _workload(spec, device, dtype)
    device_report = api.describe_device(device)
    screening = SearchConfig().bench([], workload.decoder is not None)
    rows = {}
    for text in recipes:
        variant = api.recipe_variant(text)
        row = rows.setdefault(variant.name, {"recipe": text})
        for label, runs, calls in () if final_only else (("screening_before", BEFORE_RUNS, before_calls), ("screening_now", screening.runs, CALLS_A_ROUND)):
            t0 = time.perf_counter()
            config = BenchConfig(**{**screening.__dict__, "variants": [Eager(), api.recipe_variant(text)], "runs": runs, "calls_a_round": calls})
            try:
                report = Harness(workload, device, device_report, config).run()
                row[label] = {**_median(report, variant.name), "baseline_ms": _median(report, "eager").get("median_ms"), "runs": runs, "calls_a_round": calls}
            except Exception as exc:  # noqa: BLE001 - a recipe that cannot run here is a row
                row[label] = {"status": "failed", "reason": str(exc)[:160]}
            finally:
                free_candidate(device)
            row[label]["wall_s"] = round(time.perf_counter() - t0, 1)
            print(f"  {spec} {variant.name} {label}: {row[label]}", file=sys.stderr, flush=True)
    final = BenchConfig(variants=[Eager(), *(api.recipe_variant(t) for t in recipes)], op_breakdown=False, signature=False, energy=False, roofline=False)
    report = Harness(workload, device, device_report, final).run()
    free_candidate(device)
    baseline = _median(report, "eager").get("median_ms")
    for name, row in rows.items():
        row["final"] = {**_median(report, name), "baseline_ms": baseline}
        f = row["final"].get("median_ms")
        for label in () if final_only else ("screening_before", "screening_now"):
            s = row[label].get("median_ms")
            row[f"{label}_over_final"] = round(s / f, 3) if s and f else None
            b = row[label].get("baseline_ms")
            row[f"{label}_speedup_over_final_speedup"] = round((b / s) / (baseline / f), 3) if s and f and b and baseline else None
    return {"workload": spec, "dtype": dtype, "conditions": {"screening": {"runs": screening.runs, "warmup": screening.warmup},
            "final": {"runs": report.conditions.get("runs"), "warmup": report.conditions.get("warmup")}}, "recipes": list(rows.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="hf:mistral,hf:whisper-encoder")
    parser.add_argument("--recipes", default=";".join(RECIPES), help="recipes separated by ';'")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--before-calls", type=int, default=2, help="calls a round of the screening run as it was")
    parser.add_argument("--final-only", action="store_true", help="the final run alone: the recipes against each other")
    parser.add_argument("--out-file", default=None)
    args = parser.parse_args()
    import torch

    from agnitra import api
    from agnitra.device import resolve_device
    from agnitra.results import to_dict
    from agnitra.telemetry.signature import software_versions

    device = resolve_device(args.device)
    device_doc = to_dict(api.describe_device(device))
    slug = "".join(ch if ch.isalnum() else "-" for ch in device_doc["name"].lower()).strip("-")
    path = Path(args.out_file or f"benchmarks/results/screen-agreement-{slug}-{dt.date.today().isoformat()}.json")
    doc = {"schema": "agnitra.screen-agreement/1", "date": dt.date.today().isoformat(), "device": device_doc, "versions": software_versions(),
           "command": " ".join(sys.argv), "what": "each recipe's median in the search's screening run (as it was, as it is) over its median in the final run",
           "workloads": []}
    for spec in [w for w in args.workloads.split(",") if w]:
        print(f"== {spec}", flush=True)
        try:
            doc["workloads"].append(measure(spec, device, args.dtype, [r.strip() for r in args.recipes.split(";") if r.strip()], args.before_calls, args.final_only))
        except Exception as exc:  # noqa: BLE001 - a workload that fails is a row
            doc["workloads"].append({"workload": spec, "status": "failed", "reason": str(exc)[:300]})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, default=str))
        torch.cuda.empty_cache() if device.type == "cuda" else None
    for w in doc["workloads"]:
        for r in w.get("recipes", []):
            print(f"{w['workload']:22s} {r['recipe'][:60]:60s} final {r['final'].get('median_ms')} before/final {r.get('screening_before_over_final')}  now/final {r.get('screening_now_over_final')}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

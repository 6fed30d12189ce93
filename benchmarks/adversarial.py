"""Verification that cannot be fooled: the adversarial zoo on every runtime of a device, and what the
exploring inputs cost real workloads' recipes.

    PYTHONPATH=src python benchmarks/adversarial.py --device cpu
    PYTHONPATH=src python benchmarks/adversarial.py --device cuda --workloads zoo:bert-base@b8,zoo:resnet50@b16

Part 1, `zoo` (agnitra.testing.adversarial: a data-dependent branch, a value read with .item(),
torch.cond, an input changed in place, a buffer counting calls, noise in forward, an aliased output,
NaN on some inputs), each at seeds 0 and 1: every runtime the device offers as a recipe beside eager
in one harness run (the CPU: compile, ONNX Runtime fp32 and int8, threads; a GPU: compile default and
reduce-overhead, CUDA graphs, bf16 and fp16 precision, ONNX Runtime where it has a CUDA provider). Per
variant: verified or not (the reason), and whether it is in fact right on the case's truth inputs (the
other branch, larger values, untouched copies). `wrong_verified` counts answers verified yet wrong:
the failure this work prevents; it must be 0.

Part 2, `exploring` (--workloads, fp32 at the given batch): lossless and lossy recipes on real zoo
workloads, each one's error on the held-out sets and on every exploring set beside the threshold it
is judged by there (lossy recipes: the looser bound, verify.exploring_threshold). `turned_away`
counts recipes that pass the held-out sets and fail an exploring set: what the exploring check costs.

Writes benchmarks/results/adversarial-<device>-<date>.json (or --out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time
from pathlib import Path


from agnitra.api import describe_device
from agnitra.bench.harness import BenchConfig, Harness
from agnitra.bench.variants import get_variant
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.errors import first_line
from agnitra.testing import ADVERSARIAL, wrong_answer
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.prepare import prepare_workload
from result_file import write_result

SCHEMA = "agnitra.bench.adversarial/1"
SEEDS = (0, 1)
RUNTIMES = {
    "cpu": ["compile", "onnxruntime", "onnxruntime(int8=true)", "threads"],
    "cuda": ["compile", "compile(mode=reduce-overhead)", "cuda-graphs", "precision(dtype=bf16)", "precision(dtype=fp16)", "onnxruntime"],
}
LOSSY_TRUTH = {"default": 1e-3, "lossy": 0.1}  # a verified lossy answer is wrong where it errs like a frozen branch
EXPLORING_RECIPES = {
    "cpu": ["compile", "dynamic-int8", "int8-weight-only", "onnxruntime(int8=true)"],
    "cuda": ["compile", "precision(dtype=bf16)", "precision(dtype=fp16)", "int8-weight-only", "fp8", "int4-weight-only"],
}


def _config(variants, runs: int = 3) -> BenchConfig:
    return BenchConfig(variants=variants, runs=runs, warmup=1, op_breakdown=False, signature=False, roofline=False, energy=False, load_probe_s=0)


def zoo_rows(device: str) -> list[dict]:
    rows = []
    report = describe_device(device)
    for name, case in ADVERSARIAL.items():
        for seed in SEEDS:
            model, inputs = case.build(seed)
            model, inputs = model.to(device), tuple(t.to(device) for t in inputs)
            started = time.perf_counter()
            workload, dev = prepare_workload(model, inputs, device=device)
            variants = [get_variant("eager")] + [RecipeVariant(Recipe.parse(text)) for text in RUNTIMES[dev.type]]
            harness = Harness(workload, dev, report, _config(variants))
            harness.run()
            truth = [tuple(t.to(device) for t in inputs_set) for inputs_set in case.truth(inputs)]
            for run in harness.runs[1:]:
                rows.append(_zoo_row(name, seed, case, model, run, truth, harness))
            print(f"{name} seed {seed}: {time.perf_counter() - started:.1f} s; behaviour: {workload.behaviour.summary()}", flush=True)
    return rows


def _zoo_row(name, seed, case, model, run, truth, harness) -> dict:
    result, correctness = run.result, run.result.correctness
    verified = bool(correctness and correctness.passed)
    wrong = None
    if verified:
        tolerance = LOSSY_TRUTH["lossy" if run.prepared.lossy else "default"]
        wrong = wrong_answer(model, run.prepared.call, truth, tolerance) if case.verifiable else "no answer can be verified for this case"
    return {"case": name, "seed": seed, "variant": result.name, "status": result.status, "verified": verified,
            "wrong_answer": wrong, "reason": result.reason, "reference_problem": harness.reference_problem}


def exploring_rows(device: str, specs: list[str]) -> list[dict]:
    rows = []
    report = describe_device(device)
    for spec in specs:
        name, _, batch = spec.partition("@b")
        try:
            workload, dev = prepare_workload(name, device=device, batch=int(batch) if batch else None)
        except Exception as exc:  # noqa: BLE001 - a workload that does not build is a row, not the end
            rows.append({"workload": spec, "error": first_line(exc)})
            continue
        variants = [get_variant("eager")] + [RecipeVariant(Recipe.parse(text)) for text in EXPLORING_RECIPES[dev.type]]
        harness = Harness(workload, dev, report, _config(variants, runs=2))
        harness.run()
        for run in harness.runs[1:]:
            correctness = run.result.correctness
            details = correctness.details if correctness else {}
            rows.append({"workload": spec, "recipe": run.result.name, "status": run.result.status, "lossy": bool(run.prepared and run.prepared.lossy),
                         "passed": bool(correctness and correctness.passed), "held_out_value": correctness.value if correctness else None,
                         "threshold": correctness.threshold if correctness else None, "exploring": details.get("exploring"),
                         "error": details.get("error") or run.result.reason})
        print(f"{spec}: {workload.behaviour.summary()}; {harness.plan.checks()['exploring']}", flush=True)
    return rows


def summary(zoo: list[dict], exploring: list[dict]) -> dict:
    verified = [r for r in zoo if r["verified"]]
    wrong = [r for r in verified if r["wrong_answer"]]
    passed_held_out = [r for r in exploring if r.get("error", "") and str(r["error"]).startswith(("on the ", "verification: on the "))]
    return {
        "zoo_variants": len(zoo), "zoo_verified": len(verified), "wrong_verified": len(wrong),
        "wrong": [f"{r['case']} seed {r['seed']}: {r['variant']}: {r['wrong_answer']}" for r in wrong],
        "refused_up_front": sum(r["status"] == "skipped" for r in zoo),
        "exploring_recipes": len(exploring), "exploring_passed": sum(bool(r.get("passed")) for r in exploring),
        "turned_away": [f"{r['workload']}: {r['recipe']}: {r['error']}" for r in passed_held_out],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workloads", default="", help="comma-separated zoo workloads for part 2, NAME@bBATCH")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    report = describe_device(args.device)
    tag = re.sub(r"[^a-z0-9]+", "-", report.name.lower()).strip("-")
    out = Path(args.out or Path(__file__).parent / "results" / f"adversarial-{tag}-{dt.date.today().isoformat()}.json")
    conditions = {"seeds": list(SEEDS), "runtimes": RUNTIMES, "exploring_recipes": EXPLORING_RECIPES, "workloads": args.workloads,
                  "truth_tolerance": LOSSY_TRUTH, "runs": "3 timed calls a variant (verification is what is measured)"}

    def write(zoo: list[dict], exploring: list[dict]) -> None:  # after each part: a run stopped later keeps the first
        write_result(out, SCHEMA, report, conditions=conditions, summary=summary(zoo, exploring), zoo=zoo, exploring=exploring,
                     wall_s=round(time.perf_counter() - started, 1))
        print(f"wrote {out}: {summary(zoo, exploring)}", flush=True)

    zoo = zoo_rows(args.device)
    write(zoo, [])
    write(zoo, exploring_rows(args.device, [s for s in args.workloads.split(",") if s]))


if __name__ == "__main__":
    main()

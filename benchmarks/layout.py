"""Layout re-optimisation on trained weights (issue 54): for each state-transform pipeline and each
mode (none / once / iterative), the importance kept and weight error of the changed layers, the
2:4 magnitude gap closed (default 2:4 against unstructured 50% on the same layers; apex reports
about 35% for channel permutation) and the model's quality on held-out data against the original,
all on the CPU; and the solver's time for D = 2,500 channels.

    PYTHONPATH=src python benchmarks/layout.py [--workloads minilm,tinylm-py] [--solve-seconds 60]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time
from pathlib import Path

import torch

from agnitra.api import benchmark, describe_device
from agnitra.bench.variants.given import GivenModel
from agnitra.relayout.pipeline import MODES, run_layout, targets
from agnitra.transforms.permutation.steps import parse_steps
from agnitra.transforms.permutation.costs import TwoFour
from agnitra.transforms.permutation.solver import solve
from agnitra.transforms.permutation.spaces import find_spaces
from agnitra.workloads.prepare import prepare_workload
from result_file import write_result

CALIBRATION = "8 batches from Workload.calibration_inputs: tinylm-py training-corpus windows of 128 tokens (prefill form), minilm its example inputs and 7 like them"
CALIBRATION_BATCHES = 8  # as `agnitra layout` does by default: a decoder's training text, else inputs like the example
PIPELINES = ["sparsity:2:4", "quant:int4:g32", "sparsity:2:4,quant:int4:g32"]


def unstructured_kept(model, calibration) -> tuple[float, float]:
    """Importance kept by unstructured 50% on the layers 2:4 changes (the bound 2:4 is judged by),
    and by 50% of each row (apex's "50% rows", its efficacy's 100%: no permutation can move
    importance between rows, so this is the bound a permutation can reach)."""
    from agnitra.relayout.pipeline import activation_norms

    step = parse_steps("sparsity:2:4")[0]
    layers = targets(model, find_spaces(model, calibration[0]), step)
    norms = activation_norms(model, calibration, list(layers))
    kept = by_rows = total = 0.0
    for name, layer in layers.items():
        importance = layer.weight.detach().float().abs() * norms[name]
        kept += float(importance.flatten().topk(importance.numel() // 2).values.sum())
        by_rows += float(importance.topk(importance.shape[1] // 2, dim=1).values.sum())
        total += float(importance.sum())
    return kept / total, by_rows / total


def workload_rows(name: str, solve_seconds: float) -> list[dict]:
    workload, _ = prepare_workload(f"zoo:{name}", device="cpu")
    model = workload.model
    calibration = workload.calibration_inputs(CALIBRATION_BATCHES)
    bound, rows_bound = unstructured_kept(model, calibration)
    rows = []
    for text in PIPELINES:
        runs = {mode: run_layout(model, calibration, parse_steps(text), mode, solve_seconds=solve_seconds) for mode in MODES}
        quality = benchmark(workload, variants=["eager", *(GivenModel(f"layout {mode}", run.model) for mode, run in runs.items())], device="cpu", runs=2,
                            warmup=1, op_breakdown=False, store=False)
        by_name = {v.name: v for v in quality.variants}
        for mode, run in runs.items():
            check = by_name[f"layout {mode}"].correctness
            row = {"workload": name, "pipeline": text, "mode": mode, "steps": run.to_dict()["steps"],
                   "quality": {"metric": check.metric, "value": check.value, "passed": check.passed, "details": check.details} if check else None}
            first = run.steps[0]
            if first.step == "sparsity:2:4":
                default = runs["none"].steps[0].importance_kept
                row["two_four_gap_closed"] = (first.importance_kept - default) / (bound - default) if bound > default else None
                row["unstructured_50_kept"] = bound
                row["rows_50_kept"] = rows_bound  # apex's efficacy: the gap to 50% of each row closed
                row["apex_efficacy"] = (first.importance_kept - default) / (rows_bound - default) if rows_bound > default else None
            rows.append(row)
            print(name, text, mode, [(s.step, round(s.importance_kept, 4), round(s.weight_error, 4), s.permuted_spaces) for s in run.steps],
                  check and (check.metric, round(check.value, 5)), row.get("two_four_gap_closed"), flush=True)
    return rows


def solver_row(seconds: float) -> dict:
    generator = torch.Generator().manual_seed(0)
    importance = torch.randn(2500, 2500, generator=generator).abs() * torch.rand(2500, generator=generator)
    started = time.monotonic()
    solution = solve(TwoFour(importance), seconds=seconds)
    return {"channels": 2500, "rows": 2500, "cap_s": seconds, "wall_s": round(time.monotonic() - started, 1), "gain": solution.gain, "seed": solution.seed,
            "threads": torch.get_num_threads(), "moves": solution.swaps, "load_average_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="minilm,tinylm-py")
    parser.add_argument("--solve-seconds", type=float, default=60.0)
    parser.add_argument("--tag", default="", help="appended to the result file's name")
    parser.add_argument("--out", type=Path, help="the result file (default: results/layout-cpu-DATE[-TAG].json)")
    args = parser.parse_args()
    out = args.out or Path(__file__).parent / "results" / f"layout-cpu-{dt.date.today().isoformat()}{'-' + args.tag if args.tag else ''}.json"
    report = describe_device("cpu")
    rows = []
    conditions = {"solve_seconds_per_step": args.solve_seconds, "calibration": CALIBRATION, "load_average_before": os.getloadavg()}
    for name in args.workloads.split(","):
        rows += workload_rows(name, args.solve_seconds)
        write_result(out, "agnitra.layout-bench/1", report, conditions=conditions, rows=rows)
    conditions["load_average_before_solver"] = os.getloadavg()
    write_result(out, "agnitra.layout-bench/1", report, conditions={**conditions, "load_average_after": os.getloadavg()}, rows=rows, solver=solver_row(60.0))
    print("wrote", out)


if __name__ == "__main__":
    main()

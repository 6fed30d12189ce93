"""How well the cost model's P(pass) holds on architectures it never saw: trained on the collected
datasets, it predicts whether each candidate measured on held-out workloads passed verification.

The held-out rows (default: benchmarks/datasets/held-out/*.csv, the twelve transformers families of
hf_families.py measured on the CPU) are never trained on. For each, the model trained on the
collected datasets of the same device kind gives P(pass); the result file gives the log loss, the
Brier score, the AUC (does a passing candidate get a higher P than a failing one), the mean P on
the candidates that failed and on those that passed, and how many failures got P >= 0.5, with the
checks the workloads are verified by as features and without them (an ablation: what the model
predicted before it knew them).

    python benchmarks/pass_calibration.py
    python benchmarks/pass_calibration.py --dataset benchmarks/datasets/dataset-cpu-4-2026-11-26.csv --held-out X.csv
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from agnitra.search.costmodel import CostModel, load_rows  # noqa: E402
from agnitra.telemetry.signature import software_versions  # noqa: E402

EPS = 1e-6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", help="training dataset CSV (repeat); default: benchmarks/datasets/*.csv")
    parser.add_argument("--held-out", action="append", help="held-out dataset CSV (repeat); default: benchmarks/datasets/held-out/*.csv")
    parser.add_argument("--out-file", help="default: benchmarks/results/pass-calibration-<devices>-<date>.json")
    args = parser.parse_args()
    datasets = args.dataset or sorted(str(p) for p in (ROOT / "benchmarks" / "datasets").glob("*.csv"))
    held_paths = args.held_out or sorted(str(p) for p in (ROOT / "benchmarks" / "datasets" / "held-out").glob("*.csv"))
    held = [r for r in load_rows(datasets=held_paths) if r.get("status") == "ok" and r.get("passed") is not None]
    kinds = sorted({r.get("device_kind") or "" for r in held})
    results = {}
    for kind in kinds:
        training = load_rows(datasets=datasets, device_kind=kind)
        test = [r for r in held if r.get("device_kind") == kind]
        results[kind] = {"training_rows": len(training), "held_out_rows": len(test), "held_out_workloads": sorted({r.get("source") or r.get("workload") for r in test}),
                         "with_checks": score(training, test), "without_checks": score(_unchecked(training), _unchecked(test)),
                         "after_one_lossy_recipe": after_one_lossy(training, test)}
        print(kind, json.dumps({k: v for k, v in results[kind].items() if k != "held_out_workloads"}, indent=1))
    doc = {
        "schema": "agnitra.pass-calibration/1", "date": dt.date.today().isoformat(), "command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(),
        "versions": software_versions(), "datasets": [Path(p).name for p in datasets], "held_out": [Path(p).name for p in held_paths],
        "what": "the cost model trained on the datasets predicts P(pass) for each candidate measured (status ok) on the held-out workloads; "
                "with_checks: the check each workload is verified by (rel_error, top1, ...) is a feature; without_checks: it is not; "
                "after_one_lossy_recipe: each lossy recipe predicted once another lossy recipe of its workload was verified (every ordered pair), "
                "by the classifier alone and by the lower of it and what the observed shift of the quality error leaves (strategies/sensitivity.py)",
        "results": results,
    }
    out = Path(args.out_file) if args.out_file else ROOT / "benchmarks" / "results" / f"pass-calibration-{'-'.join(kinds)}-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {out}")


def _unchecked(rows: list[dict]) -> list[dict]:
    return [dict(r, comparison=None) for r in rows]


def score(training: list[dict], test: list[dict]) -> dict:
    model = CostModel.fit(training)
    return _metrics([prediction.p_pass for prediction in model.predict(test)], [bool(r["passed"]) for r in test])


def after_one_lossy(training: list[dict], test: list[dict]) -> dict:
    """Each lossy recipe of a held-out workload predicted once another lossy recipe of the same
    workload was verified (every ordered pair): the classifier's P(pass), and the lower of it and
    the P(pass) the observed shift of the quality error leaves (`strategies.sensitivity`), as the
    model strategy uses them."""
    from collections import defaultdict
    from types import SimpleNamespace

    from agnitra.search.space import Candidate
    from agnitra.search.strategies.sensitivity import Sensitivity, is_lossy
    from agnitra.transforms.recipe import Recipe, Step
    from agnitra.verify.compare import Correctness, default_threshold

    model = CostModel.fit(training)
    by_workload = defaultdict(list)
    for r in test:
        candidate = Candidate(Recipe(tuple(Step(s["transform"], dict(s.get("params") or {})) for s in json.loads(r["recipe"]))), 1.0)
        if r.get("quality_error") is not None and is_lossy(candidate):
            by_workload[r.get("source") or r.get("workload")].append((r, candidate))
    p_classifier, p_shifted, y = [], [], []
    for rows in by_workload.values():
        predictions = model.predict([r for r, _ in rows])
        for i, ((b, cb), pb) in enumerate(zip(rows, predictions)):
            for j, ((a, ca), pa) in enumerate(zip(rows, predictions)):
                if i == j:
                    continue
                sensitivity = Sensitivity()
                import torch

                threshold = default_threshold(a["quality_metric"], getattr(torch, a.get("dtype") or "float32"))
                value = a["quality_value"] if a.get("quality_value") is not None else a["quality_error"]
                sensitivity.learn(ca, SimpleNamespace(status="ok", correctness=Correctness(a["quality_metric"], value, bool(a["passed"]), threshold)), pa)
                shifted = sensitivity.pass_probability(cb, pb)
                p_classifier.append(pb.p_pass)
                p_shifted.append(pb.p_pass if shifted is None else min(pb.p_pass, shifted))
                y.append(bool(b["passed"]))
    return {"workloads": len(by_workload), "pairs": len(y), "classifier": _metrics(p_classifier, y), "with_sensitivity": _metrics(p_shifted, y)}


def _metrics(p: list[float], y: list[bool]) -> dict:
    failed = [q for q, passed in zip(p, y) if not passed]
    passed = [q for q, ok in zip(p, y) if ok]
    pairs = len(failed) * len(passed)
    return {
        "candidates": len(y), "failed": len(failed),
        "log_loss": round(-statistics.mean(math.log(max(EPS, q if ok else 1 - q)) for q, ok in zip(p, y)), 4),
        "brier": round(statistics.mean((q - ok) ** 2 for q, ok in zip(p, y)), 4),
        "auc": round(sum((a > b) + 0.5 * (a == b) for a in passed for b in failed) / pairs, 4) if pairs else None,
        "mean_p_failed": round(statistics.mean(failed), 4) if failed else None,
        "mean_p_passed": round(statistics.mean(passed), 4) if passed else None,
        "failed_with_p_over_half": sum(q >= 0.5 for q in failed),
        "passed_with_p_under_half": sum(q < 0.5 for q in passed),
    }


if __name__ == "__main__":
    main()

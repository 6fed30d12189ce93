"""Replay the collected datasets: how many measurements each strategy needs, nothing re-measured.

For each held-out workload (one workload at one size on one device) with enough measured
recipes, its measured recipes are the space and the dataset answers every "measurement". Each
strategy searches that space until it measures a recipe that passed verification within 3% of
the best passing one (`--within`); the count is what it needed. `model` is trained on the other
workloads only (or, with --hold-out family, on other families only), as a search on a new
model would be; `random` is averaged over --seeds seeds, `tpe` over fewer (it is slower);
`popular` learns nothing: the recipes in the order of their mean speedup on the training
workloads, the bar a model must clear to show it learned more than which recipe usually wins. With
--stop-gain (on by default) the model is also replayed until it stops on its own: how many it
measured, and how close to the best its best was then. The result file gives, per device kind, each strategy's mean and median count, the model's count
against random's and TPE's, and each workload's counts.

    python benchmarks/search.py                                # every dataset in benchmarks/datasets
    python benchmarks/search.py --dataset X.csv --hold-out family
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from agnitra.results import Correctness  # noqa: E402
from agnitra.search.costmodel import CostModel, load_rows  # noqa: E402
from agnitra.search.costmodel.evaluate import group_key  # noqa: E402
from agnitra.search.space import Candidate  # noqa: E402
from agnitra.search.strategies.model import MEASURE_S, STOP_GAIN, ModelGuided  # noqa: E402
from agnitra.search.strategies.random_order import RandomOrder  # noqa: E402
from agnitra.search.strategies.tpe import TPE  # noqa: E402
from agnitra.telemetry.signature import software_versions  # noqa: E402
from agnitra.transforms.recipe import Recipe, Step  # noqa: E402

MIN_RECIPES = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", help="dataset CSV (repeat); default: benchmarks/datasets/*.csv")
    parser.add_argument("--within", type=float, default=0.03, help="a hit: a passing recipe within this fraction of the best")
    parser.add_argument("--seeds", type=int, default=20, help="random search's seeds")
    parser.add_argument("--tpe-seeds", type=int, default=3)
    parser.add_argument("--hold-out", choices=("workload", "family"), default="workload")
    parser.add_argument("--out-file", help="default: benchmarks/results/search-replay-<devices>-<date>.json")
    parser.add_argument("--min-p-pass", type=float, default=None, help="the model strategy's MIN_P_PASS for this replay (an ablation; default: the strategy's)")
    parser.add_argument("--stop-gain", type=float, default=STOP_GAIN, help="also replay the model strategy until it stops on its own at this expected gain (0: not)")
    parser.add_argument("--only-model", action="store_true", help="replay the model strategy alone (an ablation: random, TPE and popular do not change)")
    args = parser.parse_args()
    if args.min_p_pass is not None:
        import agnitra.search.strategies.model as model_strategy

        model_strategy.MIN_P_PASS = args.min_p_pass
    paths = args.dataset or sorted(str(p) for p in (ROOT / "benchmarks" / "datasets").glob("*.csv"))
    rows = load_rows(datasets=paths)
    started = time.time()
    by_device: dict[str, list[dict]] = defaultdict(list)
    groups = workload_groups(rows)
    for key, members in sorted(groups.items()):
        space = recipes_of(members)
        if len(space) < MIN_RECIPES or not any(r.passed for r in space.values()):
            continue
        held = set(map(id, members)) if args.hold_out == "workload" else {id(r) for r in rows if same_family(r, members[0])}
        training = [r for r in rows if id(r) not in held and r.get("device_kind") == members[0].get("device_kind")]
        counts = replay(members[0], space, training, args)
        by_device[members[0].get("device_kind") or "?"].append({"workload": key, "recipes": len(space), "training_rows": len(training), **counts})
        print(key, len(space), {k: round(v, 1) for k, v in counts.items()}, flush=True)
    summary = {kind: summarise(entries) for kind, entries in by_device.items()}
    doc = {
        "schema": "agnitra.search-replay/1", "date": dt.date.today().isoformat(), "command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(),
        "versions": software_versions(), "datasets": [Path(p).name for p in paths], "dataset_devices": sorted({r.get("device") or "" for r in rows}),
        "conditions": {"within": args.within, "min_p_pass": args.min_p_pass, "stop_gain": args.stop_gain, "only_model": args.only_model, "random_seeds": args.seeds, "tpe_seeds": args.tpe_seeds, "hold_out": args.hold_out, "min_recipes": MIN_RECIPES,
                       "what": "measurements a strategy needs until it measures a recipe that passed verification within `within` of the best passing recipe of the workload; the dataset answers each measurement (nothing re-measured); the model strategy is trained on the other workloads (or families) only"},
        "summary": summary, "workloads": by_device, "elapsed_s": round(time.time() - started, 1),
    }
    out = Path(args.out_file) if args.out_file else ROOT / "benchmarks" / "results" / f"search-replay-{'-'.join(sorted(by_device))}-{args.hold_out}-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(doc, indent=2))
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")


def workload_groups(rows: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[group_key(r, "workload")].append(r)
    return groups


def same_family(row: dict, other: dict) -> bool:
    return row.get("device_kind") == other.get("device_kind") and (row.get("family") or row.get("workload")) == (other.get("family") or other.get("workload"))


def recipes_of(members: list[dict]) -> dict[str, SimpleNamespace]:
    """Each distinct recipe of the workload with what was measured for it (the median speedup
    where it was measured more than once; it passed only if every measurement passed)."""
    seen: dict[str, list[dict]] = defaultdict(list)
    for r in members:
        if r.get("status") in ("ok", "failed"):
            seen[r["recipe"]].append(r)
    out = {}
    for key, measured in seen.items():
        speedups = [r["speedup"] for r in measured if r.get("status") == "ok" and r.get("speedup")]
        passed = all(bool(r.get("passed")) for r in measured) and bool(speedups)
        setups = [r["setup_s"] for r in measured if r.get("setup_s") is not None]
        out[key] = SimpleNamespace(status="ok" if speedups else "failed", speedup=statistics.median(speedups) if speedups else None, passed=passed,
                                   correctness=Correctness("rel_error", measured[0].get("quality_error"), passed, _threshold(measured[0])) if speedups else None,
                                   model_bytes=measured[0].get("model_bytes"), steps=json.loads(key), setup_s=statistics.median(setups) if setups else None,
                                   reason=measured[0].get("reason") or "")
    return out


def _threshold(row: dict) -> float | None:
    """The check's default threshold for the row's metric and dtype, as a quality error (the unit
    the replay's correctness values are in)."""
    import torch

    from agnitra.results import quality_error
    from agnitra.verify.compare import default_threshold

    metric = row.get("quality_metric")
    if metric not in ("rel_error", "cosine", "top1", "logits"):
        return None
    return quality_error(metric, default_threshold(metric, getattr(torch, str(row.get("dtype") or "float32"), torch.float32)))


def recipe_key(candidate: Candidate) -> str:
    """A candidate's recipe as the datasets' `recipe` column writes it: the key of `space`."""
    return json.dumps([{"params": dict(s.params), "transform": s.transform} for s in candidate.recipe.steps], sort_keys=True)


def candidates(space: dict[str, SimpleNamespace]) -> list[Candidate]:
    return [Candidate(Recipe(tuple(Step(s["transform"], dict(s.get("params") or {})) for s in result.steps)), 1.0) for result in space.values()]


def replay(workload: dict, space: dict[str, SimpleNamespace], training: list[dict], args) -> dict[str, float]:
    best = max(r.speedup for r in space.values() if r.passed)
    hits = {k for k, r in space.items() if r.passed and r.speedup >= best / (1 + args.within)}
    cands = candidates(space)
    row = {k: v for k, v in workload.items() if k.startswith(("sig.", "hot.", "dev.")) or k in ("device_kind", "batch", "source", "family", "workload", "task", "comparison")}
    runs = {} if args.only_model else {"random": [run(RandomOrder(cands, seed=s), space, hits) for s in range(args.seeds)],
                                       "tpe": [run(TPE(cands, seed=s), space, hits) for s in range(args.tpe_seeds)]}
    model = CostModel.fit(training) if training else None
    runs["model"] = [run(ModelGuided(cands, model=model, rows=training, workload_row=row, stop_gain=0.0), space, hits)]
    if not args.only_model:
        runs["popular"] = [run(Popular(cands, training), space, hits)]
    counts = {name: statistics.mean(n for n, _ in results) for name, results in runs.items()}
    counts.update({f"{name}_s": round(statistics.mean(t for _, t in results), 1) for name, results in runs.items()})
    if args.stop_gain:
        measured, found, seconds, failing = run_to_stop(ModelGuided(cands, model=model, rows=training, workload_row=row, stop_gain=args.stop_gain), space)
        counts.update(stopped_after=measured, stopped_best_over_best=round(found / best, 4), stopped_hit=found >= best / (1 + args.within),
                      stopped_s=round(seconds, 1), stopped_failing_s=round(failing, 1))
    return counts


class Popular:
    """No learning: the recipes in the order of their mean measured log speedup (passing or not
    counted as measured) over the training workloads; recipes never measured there come last.
    What a model must beat to show it learned more than which recipe usually wins."""

    def __init__(self, space: list[Candidate], training: list[dict]) -> None:
        import math

        scores: dict[str, list[float]] = defaultdict(list)
        for r in training:
            if r.get("status") == "ok" and r.get("speedup") and r.get("passed"):
                scores[r["recipe"]].append(math.log(r["speedup"]))
        mean = {k: sum(v) / len(v) for k, v in scores.items()}
        self.order = sorted(space, key=lambda c: -mean.get(recipe_key(c), -1e9))

    def ask(self):
        return self.order.pop(0) if self.order else None

    def tell(self, candidate, result) -> None:
        pass


def run(strategy, space: dict[str, SimpleNamespace], hits: set[str]) -> tuple[int, float]:
    """Measurements until a hit, and the seconds they would take (each recipe's measured setup, or
    the limit it was stopped at, plus MEASURE_S); a strategy that never measures a hit is charged
    the whole space."""
    seconds = 0.0
    for n in range(1, len(space) + 1):
        candidate = strategy.ask()
        if candidate is None:
            break
        key = recipe_key(candidate)
        result = space[key]
        seconds += MEASURE_S + (result.setup_s or _limit_s(result.reason))
        if key in hits:
            return n, seconds
        strategy.tell(candidate, result)
    return len(space), seconds  # every candidate was measured, none a hit


def run_to_stop(strategy, space: dict[str, SimpleNamespace]) -> tuple[int, float, float, float]:
    """Measurements until the strategy stops on its own (the model's STOP_GAIN), the best passing
    speedup it had measured by then (1.0, the baseline, if none passed), and the seconds they
    would take (as `run` counts them), of which on recipes that failed verification."""
    found, measured, seconds, failing = 1.0, 0, 0.0, 0.0
    while (candidate := strategy.ask()) is not None:
        result = space[recipe_key(candidate)]
        measured += 1
        took = MEASURE_S + (result.setup_s or _limit_s(result.reason))
        seconds += took
        if result.passed:
            found = max(found, result.speedup)
        elif result.status == "ok":
            failing += took
        strategy.tell(candidate, result)
    return measured, found, seconds, failing


def _limit_s(reason: str) -> float:
    import re

    match = re.search(r"time limit of (\d+(?:\.\d+)?) s", reason or "")
    return float(match.group(1)) if match else 0.0


def summarise(entries: list[dict]) -> dict:
    out = {"workloads": len(entries)}
    names = [n for n in ("random", "tpe", "popular", "model") if entries and n in entries[0]]
    for name in names:
        values = [e[name] for e in entries]
        seconds = [e[f"{name}_s"] for e in entries]
        out[name] = {"mean": round(statistics.mean(values), 2), "median": round(statistics.median(values), 2), "mean_s": round(statistics.mean(seconds), 1)}
    for other in (n for n in ("random", "tpe", "popular") if n in names):
        out[f"model_over_{other}"] = round(out["model"]["mean"] / out[other]["mean"], 3)
    if "random" in names:  # a strategy right first time on every workload: the lowest model_over_random can be
        out["floor_over_random"] = round(1.0 / out["random"]["mean"], 3)
    if entries and "stopped_after" in entries[0]:
        out["model_stopping"] = {"mean_measured": round(statistics.mean(e["stopped_after"] for e in entries), 2), "hit_share": round(statistics.mean(e["stopped_hit"] for e in entries), 3),
                                 "mean_best_over_best": round(statistics.mean(e["stopped_best_over_best"] for e in entries), 4),
                                 "worst_best_over_best": min(e["stopped_best_over_best"] for e in entries), "mean_recipes": round(statistics.mean(e["recipes"] for e in entries), 1)}
        if "stopped_s" in entries[0]:  # the share of the searches' seconds on recipes that failed verification
            out["model_stopping"]["failed_verification_share"] = round(sum(e["stopped_failing_s"] for e in entries) / max(1e-9, sum(e["stopped_s"] for e in entries)), 3)
    if "tpe" in names:
        out["model_beats_tpe_on"] = sum(e["model"] < e["tpe"] for e in entries)
        out["tpe_beats_model_on"] = sum(e["tpe"] < e["model"] for e in entries)
    return out

if __name__ == "__main__":
    main()

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

With --ppo the learning agent is replayed too (issue 55's held-out benchmark): for each held-out
workload a policy is trained on the other workloads' rows of its device kind (`train_policy`:
behaviour cloning, then --ppo-steps of PPO on the cost model of the same rows) and the `ppo`
strategy plays it over the workload's measured recipes. Per workload: its first proposal (the
greedy recipe) against plain torch.compile measured there, whether 5 measurements reach within 3%
of the best, and its count against TPE's. With --transfer-from (another device's datasets) a policy
trained there is fine-tuned with --transfer-measurements rows of this device's training workloads
(the measurements its own `ppo` strategy asks for on --transfer-workloads of them, drawn at random)
and judged by the same figures. A replay: the agent chooses only among the recipes measured there.

    python benchmarks/search.py                                # every dataset in benchmarks/datasets
    python benchmarks/search.py --dataset X.csv --hold-out family
    python benchmarks/search.py --ppo --dataset-glob 'dataset-cpu*' --out-file F.json
    python benchmarks/search.py --ppo --dataset-glob 'dataset-h100*' --transfer-from 'dataset-cpu*' --out-file F.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agnitra.errors import UserError  # noqa: E402
from agnitra.results import Correctness, DeviceReport  # noqa: E402
from agnitra.search.costmodel import CostModel, load_rows  # noqa: E402
from agnitra.search.costmodel.evaluate import group_key  # noqa: E402
from agnitra.search.space import Candidate  # noqa: E402
from agnitra.search.strategies.model import MEASURE_S, STOP_GAIN, ModelGuided  # noqa: E402
from agnitra.search.strategies.random_order import RandomOrder  # noqa: E402
from agnitra.search.strategies.tpe import TPE  # noqa: E402
from agnitra.telemetry.signature import device_signature, signature_id  # noqa: E402
from agnitra.transforms.recipe import Recipe, Step  # noqa: E402
from result_file import write_result  # noqa: E402

MIN_RECIPES = 6
FIRST_MEASUREMENTS = 5  # the agent's gate: within `within` of the best in this many measurements


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
    parser.add_argument("--dataset-glob", help="the datasets in benchmarks/datasets matching this pattern (instead of --dataset)")
    parser.add_argument("--ppo", action="store_true", help="also replay the learning agent, a policy trained for each held-out workload")
    parser.add_argument("--ppo-steps", type=int, default=2048, help="PPO steps after the cloning, each policy")
    parser.add_argument("--transfer-from", help="datasets (a pattern in benchmarks/datasets) of another device whose policy is fine-tuned here")
    parser.add_argument("--transfer-measurements", type=int, default=20)
    parser.add_argument("--transfer-workloads", type=int, default=4, help="training workloads the fine-tuning measurements are spread over")
    parser.add_argument("--transfer-steps", type=int, default=256, help="PPO steps of the fine-tuning")
    parser.add_argument("--transfer-draw", choices=("random", "family"), default="random",
                        help="the fine-tuning workloads: drawn at random, or each of another family (conv, mlp, tfm, lm, ...) where there are enough")
    parser.add_argument("--agent-weights", choices=("latency", "device"), default="latency",
                        help="the agent's reward: latency (alpha 1, beta 0: what the gates judge) or the device's (`Weights.for_device`)")
    parser.add_argument("--workloads", help="replay only the workloads whose key contains one of these (comma-separated)")
    parser.add_argument("--agent-folds", type=int, default=0,
                        help="K: the workloads dealt into K folds, one policy a fold trained without the fold's workloads (0: one policy a held-out workload or family)")
    parser.add_argument("--part", help="K/N: replay every Nth workload (with --agent-folds, fold) from the Kth (parts run side by side, then --merge)")
    parser.add_argument("--merge", nargs="+", help="join the result files of the parts of one replay into --out-file, summarized anew")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, Path(args.out_file))
    if args.min_p_pass is not None:
        import agnitra.search.strategies.model as model_strategy

        model_strategy.MIN_P_PASS = args.min_p_pass
    paths = args.dataset or sorted(str(p) for p in (ROOT / "benchmarks" / "datasets").glob(f"{args.dataset_glob or '*'}.csv"))
    rows = load_rows(datasets=paths)
    started = time.time()
    args.source = source_policy(args) if args.transfer_from else None
    by_device: dict[str, list[dict]] = defaultdict(list)
    groups = workload_groups(rows)
    kinds, machine = sorted({r.get("device_kind") or "?" for r in rows}), replay_machine()
    out = Path(args.out_file) if args.out_file else ROOT / "benchmarks" / "results" / f"search-replay-{'-'.join(kinds)}-{args.hold_out}-{dt.date.today().isoformat()}.json"
    k, n = map(int, (args.part or "1/1").split("/"))
    args.fold_of = {key: i % args.agent_folds for i, key in enumerate(sorted(groups))} if args.agent_folds else {}
    args.policies = {}  # one policy a fold (or a held-out family), trained once
    summary: dict = {}
    mine = [key for i, key in enumerate(sorted(groups)) if (args.fold_of[key] if args.agent_folds else i) % n == k - 1]  # with folds, a part takes whole folds
    for key in mine:
        members = groups[key]
        space = recipes_of(members)
        if len(space) < MIN_RECIPES or not any(r.passed for r in space.values()) or (args.workloads and not any(w in key for w in args.workloads.split(","))):
            continue
        began = time.time()
        held = set(map(id, members)) if args.hold_out == "workload" else {id(r) for r in rows if same_family(r, members[0])}
        training = [r for r in rows if id(r) not in held and r.get("device_kind") == members[0].get("device_kind")]
        counts = replay(members[0], space, training, args, agent_training(key, training, args))
        by_device[members[0].get("device_kind") or "?"].append({"workload": key, "recipes": len(space), "training_rows": len(training), **counts})
        print(key, len(space), f"{time.time() - began:.0f} s", {k: round(v, 1) if isinstance(v, (int, float)) else v for k, v in counts.items() if not isinstance(v, dict)}, flush=True)
        summary = {kind: summarise(entries) for kind, entries in by_device.items()}
        write_result(out, "agnitra.search-replay/2", machine, datasets=[Path(p).name for p in paths], dataset_devices=sorted({r.get("device") or "" for r in rows}),
                     conditions=conditions(args), summary=summary, workloads=by_device, elapsed_s=round(time.time() - started, 1))  # after each workload: a run stopped later keeps what it replayed
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")


def merge(paths: list[str], out: Path) -> None:
    docs = [json.loads(Path(p).read_text()) for p in paths]
    by_device: dict[str, list[dict]] = defaultdict(list)
    for doc in docs:
        for kind, entries in doc["workloads"].items():
            by_device[kind] += entries
    by_device = {kind: sorted(entries, key=lambda e: e["workload"]) for kind, entries in by_device.items()}
    first = docs[0]
    write_result(out, first["schema"], replay_machine(), datasets=first["datasets"], dataset_devices=first["dataset_devices"], conditions=first["conditions"],
                 summary={kind: summarise(entries) for kind, entries in by_device.items()}, workloads=by_device, parts=[d["command"] for d in docs],
                 elapsed_s=max(d["elapsed_s"] for d in docs))
    print(f"wrote {out}")


def conditions(args) -> dict:
    out = {"within": args.within, "min_p_pass": args.min_p_pass, "stop_gain": args.stop_gain, "only_model": args.only_model, "random_seeds": args.seeds, "tpe_seeds": args.tpe_seeds,
           "hold_out": args.hold_out, "min_recipes": MIN_RECIPES,
           "what": "measurements a strategy needs until it measures a recipe that passed verification within `within` of the best passing recipe of the workload; the dataset answers each measurement (nothing re-measured); the model strategy is trained on the other workloads (or families) only"}
    if args.ppo:
        out["agent"] = {"ppo_steps": args.ppo_steps, "weights": args.agent_weights, "workloads_filter": args.workloads, "folds": args.agent_folds,
                        "folds_how": "workloads in sorted order dealt round-robin into the folds; each fold's policy trained on the device kind's rows outside the fold (the `model` strategy and the ppo strategy's own `model` order still trained leaving one workload out)" if args.agent_folds else None, "training": "train_policy on the other workloads' (families') rows of the device kind: behaviour cloning of each run's best measured recipe, then ppo_steps of MaskablePPO on the cost model of the same rows (seed 0)",
                        "first_measurements": FIRST_MEASUREMENTS, "replay": "a replay: the agent chooses only among the recipes measured on the held-out workload; a recipe whose steps the policy's layout lacks is reached by the `model` strategy's order after the agent's proposals",
                        "plain_compile": "compile with its default parameters (an older row's missing parameters read as their defaults), measured on the workload and passed; workloads without one are not counted in that gate"}
    if args.transfer_from:
        out["transfer"] = {"draw": args.transfer_draw, "source": args.transfer_from, "source_policy": args.source.record, "measurements": args.transfer_measurements, "workloads": args.transfer_workloads, "steps": args.transfer_steps,
                           "chosen": "for each held-out workload, transfer_workloads of the other workloads drawn at random (seeded by the held-out one's name); on each, the recipes the `ppo` strategy with the source policy asks for first (its proposals, then a seeded random order), transfer_measurements in all; the policy fine-tuned on those rows alone (`train_policy(start=)`, cloning then transfer_steps of PPO on a cost model of those rows), its `model` strategy trained on them too"}
    return out


def replay_machine() -> DeviceReport:
    """The machine the replay ran on (it measured nothing: the datasets' devices are in `dataset_devices`)."""
    import torch

    signature = device_signature(torch.device("cpu"))
    return DeviceReport(signature["name"], "cpu", {**signature, "id": signature_id(signature)}, {})


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


def agent_training(key: str, training: list[dict], args) -> tuple[str, list[dict]]:
    """The policy's training rows and their name: the other workloads' (families') rows, or with
    --agent-folds those outside the held-out workload's fold."""
    if not args.agent_folds:
        return (key if args.hold_out == "workload" else f"family of {key}"), training
    fold = args.fold_of[key]
    return f"fold {fold}", [r for r in training if args.fold_of.get(group_key(r, "workload")) != fold]


def replay(workload: dict, space: dict[str, SimpleNamespace], training: list[dict], args, agent_rows: tuple[str, list[dict]] = ("", [])) -> dict[str, float]:
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
    agent = {}
    if args.ppo:
        name, rows = agent_rows
        if args.hold_out == "family" and not args.agent_folds:
            name = workload.get("family") or workload.get("workload")
        if name not in args.policies:
            args.policies[name] = trained_policy(rows, args.ppo_steps, model if rows is training else CostModel.fit(rows), args)
        agent["ppo"] = {**play(args.policies[name], space, cands, hits, model, training, row), "policy": name, "policy_rows": len(rows)}
        runs["ppo"] = [(agent["ppo"]["count"], agent["ppo"]["seconds"])]
        if args.source is not None:
            agent["source_alone"] = play(args.source, space, cands, hits, model, training, row)
            tuned, chosen = fine_tuned(args.source, workload, training, args)
            tuned_model = CostModel.fit(chosen)
            agent["fine_tuned"] = {**play(tuned, space, cands, hits, tuned_model, chosen, row), "measurements": len(chosen),
                                   "from_workloads": sorted({group_key(r, "workload") for r in chosen})}
    counts = {name: statistics.mean(n for n, _ in results) for name, results in runs.items()}
    counts.update({f"{name}_s": round(statistics.mean(t for _, t in results), 1) for name, results in runs.items()})
    if args.stop_gain:
        measured, found, seconds, failing = run_to_stop(ModelGuided(cands, model=model, rows=training, workload_row=row, stop_gain=args.stop_gain), space)
        counts.update(stopped_after=measured, stopped_best_over_best=round(found / best, 4), stopped_hit=found >= best / (1 + args.within),
                      stopped_s=round(seconds, 1), stopped_failing_s=round(failing, 1))
    return {**counts, **({"agent": agent} if agent else {})}


def trained_policy(rows: list[dict], steps: int, model, args):
    from agnitra.search.agent.train import train_policy

    return train_policy(rows, steps, cost_model=model, **weights(args)).policy


def weights(args) -> dict:
    """The agent's reward weights: the latency objective's (the gates judge speed alone), or the device's."""
    return {"alpha": 1.0, "beta": 0.0} if args.agent_weights == "latency" else {}


def play(policy, space: dict[str, SimpleNamespace], cands: list[Candidate], hits: set[str], model, rows: list[dict], row: dict) -> dict:
    """The `ppo` strategy with `policy` over the workload's measured recipes (its `model` strategy
    trained on `rows`): its first proposal against plain compile and the best, and its count."""
    from agnitra.search.agent.evaluate import plain_compile
    from agnitra.search.strategies.ppo import Ppo

    strategy = Ppo.playing(cands, policy, ModelGuided(cands, model=model, rows=rows, workload_row=row, stop_gain=0.0), row)
    reachable = len(strategy.scene.reach.candidates) if strategy.policy is not None else 0
    first = space[recipe_key(strategy.ask())]
    strategy = Ppo.playing(cands, policy, ModelGuided(cands, model=model, rows=rows, workload_row=row, stop_gain=0.0), row)
    count, seconds = run(strategy, space, hits)
    best_key = max((k for k, r in space.items() if r.passed), key=lambda k: space[k].speedup)
    compiled = [r for r in space.values() if r.status == "ok" and plain_compile(r.steps)]
    compile_bar = max((r.speedup for r in compiled if r.passed), default=None)
    return {"first": name_of(first.steps), "first_speedup": first.speedup, "first_passed": first.passed, "compile_speedup": compile_bar,
            "first_beats_compile": None if compile_bar is None else bool(first.passed and first.speedup >= compile_bar),
            "first_over_compile": None if compile_bar is None or not first.passed else round(first.speedup / compile_bar, 4),
            "best": name_of(space[best_key].steps), "best_speedup": space[best_key].speedup, "first_over_best": round((first.speedup or 0) / space[best_key].speedup, 4) if first.passed else 0.0,
            "best_reachable": best_key in {recipe_key(c) for c in strategy.scene.reach.candidates.values()} if strategy.scene is not None else False,
            "reachable": reachable, "count": count, "seconds": round(seconds, 1), f"within_in_{FIRST_MEASUREMENTS}": count <= FIRST_MEASUREMENTS}


def name_of(steps: list[dict]) -> str:
    return Recipe(tuple(Step(s["transform"], dict(s.get("params") or {})) for s in steps)).name


def source_policy(args):
    """The policy of the other device (--transfer-from), trained on all its rows."""
    from agnitra.search.agent.train import train_policy

    source = load_rows(datasets=sorted(str(p) for p in (ROOT / "benchmarks" / "datasets").glob(f"{args.transfer_from}.csv")))
    trained = train_policy(source, args.ppo_steps, **weights(args))
    trained.policy.record = {"device_class": "source", "training_rows": len(source), **trained.record()}
    print(f"source policy: {trained.record()}", flush=True)
    return trained.policy


def fine_tuned(source, workload: dict, training: list[dict], args):
    """The source policy fine-tuned on at most --transfer-measurements rows of this device: on
    --transfer-workloads training workloads drawn at random, the recipes the `ppo` strategy with
    the source policy asks for first (then a seeded random order), as a user would measure them."""
    from agnitra.search.agent.train import train_policy
    from agnitra.search.strategies.ppo import Ppo

    rng = random.Random(group_key(workload, "workload"))
    groups = {k: m for k, m in sorted(workload_groups(training).items()) if len(recipes_of(m)) >= 2}
    drawn = rng.sample(sorted(groups), min(args.transfer_workloads, len(groups)))
    if args.transfer_draw == "family":  # one workload of each of transfer_workloads families drawn at random
        families: dict[str, list[str]] = defaultdict(list)
        for key in sorted(groups):
            families[groups[key][0].get("family") or groups[key][0].get("workload") or key].append(key)
        drawn = [rng.choice(families[f]) for f in rng.sample(sorted(families), min(args.transfer_workloads, len(families)))]
    chosen: list[dict] = []
    for i, key in enumerate(drawn):
        members = groups[key]
        first_row = {}
        for r in members:
            first_row.setdefault(r["recipe"], r)  # one measurement a recipe
        cands = candidates(recipes_of(members))
        rng.shuffle(cands)
        row = {k: v for k, v in members[0].items() if k.startswith(("sig.", "hot.", "dev.")) or k in ("device_kind", "batch", "source", "family", "workload", "task", "comparison")}
        strategy = Ppo.playing(cands, source, ModelGuided(cands, stop_gain=0.0), row)
        quota = (args.transfer_measurements - len(chosen)) // (len(drawn) - i)
        for _ in range(quota):
            candidate = strategy.ask()
            if candidate is None:
                break
            measured = first_row[recipe_key(candidate)]
            chosen.append(measured)
            strategy.tell(candidate, recipes_of(members)[recipe_key(candidate)])
    try:
        return train_policy(chosen, args.transfer_steps, start=source, cost_model=CostModel.fit(chosen), **weights(args)).policy, chosen
    except UserError:  # nothing among them passed and beat its original: nothing to imitate, the source as it was
        return source, chosen


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
    names = [n for n in ("random", "tpe", "popular", "model", "ppo") if entries and n in entries[0]]
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
    if entries and "agent" in entries[0]:
        out["agent"] = {name: gates([e["agent"][name] for e in entries], [e["tpe"] for e in entries]) for name in entries[0]["agent"]}
    if out.get("agent", {}).get("fine_tuned") and out["agent"].get("ppo"):
        out["transfer"] = transfer_gap(out["agent"]["fine_tuned"], out["agent"]["ppo"])
    return out


GATES = {"first_beats_compile_share": 0.80, f"within_in_{FIRST_MEASUREMENTS}_share": 0.70}


def gates(played: list[dict], tpe: list[float]) -> dict:
    """Issue 55's figures over the held-out workloads: each gate's share, met or missed and by how much."""
    compared = [p for p in played if p["first_beats_compile"] is not None]
    shares = {"first_beats_compile_share": round(sum(p["first_beats_compile"] for p in compared) / len(compared), 3) if compared else None,
              f"within_in_{FIRST_MEASUREMENTS}_share": round(statistics.mean(p[f"within_in_{FIRST_MEASUREMENTS}"] for p in played), 3)}
    out = {"workloads": len(played), "with_plain_compile": len(compared), **shares}
    for name, target in GATES.items():
        out[f"{name}_gate"] = {"target": target, "met": shares[name] is not None and shares[name] >= target,
                               "by": None if shares[name] is None else round(shares[name] - target, 3)}
    mean_count, mean_tpe = statistics.mean(p["count"] for p in played), statistics.mean(tpe)
    out["mean_count"], out["tpe_mean_count"] = round(mean_count, 2), round(mean_tpe, 2)
    out["fewer_than_tpe_gate"] = {"met": mean_count < mean_tpe, "by": round(mean_count - mean_tpe, 2)}
    out["beats_tpe_on"], out["tpe_beats_it_on"] = sum(p["count"] < t for p, t in zip(played, tpe)), sum(t < p["count"] for p, t in zip(played, tpe))
    if compared:  # the gate counts plain compile itself as a pass: how often the first proposal was something else and faster
        out["first_faster_than_compile_share"] = round(sum((p["first_over_compile"] or 0) > 1.0 for p in compared) / len(compared), 3)
        out["median_first_over_compile"] = round(statistics.median(p["first_over_compile"] or 0.0 for p in compared), 3)
    out["first_passed_share"] = round(statistics.mean(bool(p["first_passed"]) for p in played), 3)
    out["mean_first_over_best"] = round(statistics.mean(p["first_over_best"] for p in played), 3)
    out["best_reachable_share"] = round(statistics.mean(bool(p["best_reachable"]) for p in played), 3)
    return out


def transfer_gap(tuned: dict, alone: dict) -> dict:
    """The fine-tuned policy's figures against the policy trained on this device's data alone
    (target: within 5%; a share's gap in points of share, the count's relative)."""
    out = {}
    for name in GATES:
        if tuned[name] is not None and alone[name] is not None:
            out[name] = {"fine_tuned": tuned[name], "this_device_alone": alone[name], "gap": round(tuned[name] - alone[name], 3)}
    out["mean_count"] = {"fine_tuned": tuned["mean_count"], "this_device_alone": alone["mean_count"], "relative": round(tuned["mean_count"] / alone["mean_count"] - 1, 3)}
    out["within_5pct"] = all(abs(v["gap"]) <= 0.05 for k, v in out.items() if k in GATES) and out["mean_count"]["relative"] <= 0.05
    return out

if __name__ == "__main__":
    main()

"""How good the cost model is on workloads it never saw: leave one group out (a workload at one
size on one device, or a whole family), train on the rest of that kind of device's rows, predict
the group, and score per
device kind: MAPE of the predicted speedup, Kendall's tau between predicted and measured
speedups within each group (the order a search would measure in; also over the pairs measured
further apart than the noise alone), the pass classifier's
accuracy and how many failing recipes it caught, and the regret of trusting its top pick."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np

from agnitra.search.costmodel.model import CostModel, timed

MIN_GROUP = 3  # measured recipes a group needs to be scored
# two recipes of a group whose measured speedups differ by less than this are not told apart by
# `kendall_tau_beyond_noise`: about what the same recipe measured twice on the CPU differs by
NOISE_RATIO = 1.10
SPEEDUP_BANDS = ((0.0, 0.3), (0.3, 0.7), (0.7, 0.95), (0.95, 1.05), (1.05, 1.5), (1.5, math.inf))  # measured speedup: where the error lies


@dataclass
class DeviceScore:
    device_kind: str
    groups: int = 0
    rows: int = 0
    mape: float | None = None  # of the speedup, over rows measured ok
    kendall_tau: float | None = None  # mean over groups
    kendall_tau_beyond_noise: float | None = None  # mean over groups, over the pairs measured NOISE_RATIO apart or more
    pass_accuracy: float | None = None
    failures_caught: float | None = None  # share of failing recipes predicted to fail
    top1_regret: float | None = None  # mean over groups: 1 - measured speedup of the predicted best / the best's
    mape_by_speedup: dict[str, dict] = field(default_factory=dict)  # "LOW-HIGH" of the measured speedup: rows, MAPE
    per_group: list[dict] = field(default_factory=list)


@dataclass
class Evaluation:
    by: str  # workload | family
    rows: int
    devices: list[DeviceScore]

    def to_dict(self) -> dict:
        return asdict(self)


def group_key(row: dict, by: str) -> str:
    if by == "family":
        return f"{row.get('device_kind')}|{row.get('family') or row.get('workload')}"
    return f"{row.get('device_kind')}|{row.get('source') or row.get('workload')}|batch={row.get('batch')}"


def leave_one_out(rows: list[dict], by: str = "workload", seed: int = 0, progress=None) -> Evaluation:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[group_key(r, by)].append(i)
    scored: dict[str, list[dict]] = defaultdict(list)
    keys = sorted(groups)
    for n, key in enumerate(keys):
        members = groups[key]
        measured = [i for i in members if timed(rows[i])]
        if len(measured) < MIN_GROUP:
            continue
        if progress:
            progress(f"leave out {key}", n / len(keys))
        held = set(members)
        kind = rows[members[0]].get("device_kind")  # one model per kind of device, as a search trains it
        model = CostModel.fit([r for i, r in enumerate(rows) if i not in held and r.get("device_kind") == kind], seed=seed)
        predictions = model.predict([rows[i] for i in members])
        scored[key.split("|", 1)[0]].append(_group_score(key, [rows[i] for i in members], predictions))
    return Evaluation(by, len(rows), [_device_score(kind, groups_scored) for kind, groups_scored in sorted(scored.items())])


def _group_score(key: str, rows: list[dict], predictions) -> dict:
    from scipy.stats import kendalltau

    pairs = [(p.speedup, r["speedup"]) for r, p in zip(rows, predictions) if timed(r)]
    predicted, actual = np.array([p for p, _ in pairs]), np.array([a for _, a in pairs])
    tau = kendalltau(predicted, actual).statistic if len(pairs) >= 2 and len(set(actual)) > 1 else None
    labelled = [(p.p_pass, bool(r.get("passed"))) for r, p in zip(rows, predictions) if r.get("passed") is not None or r.get("status") == "failed"]
    passing = [(p.speedup, r["speedup"]) for r, p in zip(rows, predictions) if timed(r) and r.get("passed")]
    regret = None
    if passing:
        best = max(a for _, a in passing)
        pick = max(passing, key=lambda pa: pa[0])[1]
        regret = 1.0 - pick / best
    return {
        "group": key, "rows": len(rows), "measured": len(pairs),
        "ape": [float(abs(p - a) / a) for p, a in pairs], "actual": [float(a) for _, a in pairs],
        "kendall_tau": None if tau is None or math.isnan(tau) else float(tau),
        "kendall_tau_beyond_noise": tau_beyond_noise(predicted, actual),
        "pass_right": sum((p >= 0.5) == y for p, y in labelled), "pass_labelled": len(labelled),
        "failures": sum(not y for _, y in labelled), "failures_caught": sum(p < 0.5 and not y for p, y in labelled),
        "top1_regret": regret,
    }


def tau_beyond_noise(predicted, actual, ratio: float = NOISE_RATIO) -> float | None:
    """Kendall's tau over the pairs whose measured speedups differ by `ratio` or more (recipes
    closer than that are within the measurements' noise: no order between them is right): the
    share of concordant minus discordant pairs, a tie in the prediction counting as neither."""
    concordant = discordant = 0
    for i in range(len(actual)):
        for j in range(i + 1, len(actual)):
            if max(actual[i], actual[j]) < ratio * min(actual[i], actual[j]):
                continue
            sign = (predicted[i] - predicted[j]) * (actual[i] - actual[j])
            concordant += sign > 0
            discordant += sign < 0
    pairs = concordant + discordant
    return (concordant - discordant) / pairs if pairs else None


def _device_score(kind: str, groups: list[dict]) -> DeviceScore:
    ape = [e for g in groups for e in g["ape"]]
    taus = [g["kendall_tau"] for g in groups if g["kendall_tau"] is not None]
    taus_apart = [g["kendall_tau_beyond_noise"] for g in groups if g["kendall_tau_beyond_noise"] is not None]
    labelled = sum(g["pass_labelled"] for g in groups)
    failures = sum(g["failures"] for g in groups)
    regrets = [g["top1_regret"] for g in groups if g["top1_regret"] is not None]
    per_group = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in g.items() if k not in ("ape", "actual")}
                 | {"mape": round(float(np.mean(g["ape"])), 4) if g["ape"] else None} for g in groups]
    return DeviceScore(
        kind, len(groups), sum(g["rows"] for g in groups),
        mape=round(float(np.mean(ape)), 4) if ape else None,
        kendall_tau=round(float(np.mean(taus)), 4) if taus else None,
        kendall_tau_beyond_noise=round(float(np.mean(taus_apart)), 4) if taus_apart else None,
        pass_accuracy=round(sum(g["pass_right"] for g in groups) / labelled, 4) if labelled else None,
        failures_caught=round(sum(g["failures_caught"] for g in groups) / failures, 4) if failures else None,
        top1_regret=round(float(np.mean(regrets)), 4) if regrets else None,
        mape_by_speedup=_by_band([a for g in groups for a in g["actual"]], ape),
        per_group=per_group,
    )


def repeatability(rows: list[dict], device_kind: str) -> dict:
    """How far the measurements themselves repeat, on one kind of device: over the recipes measured
    more than once on one workload and device, the absolute percentage error of taking one of its
    measured speedups for another (the MAPE a model that knew each recipe's true speedup could not
    beat, against single measurements); and the share of the pairs of recipes of a workload measured
    closer than NOISE_RATIO, which no ranking orders right but by chance."""
    measured = [r for r in rows if r.get("device_kind") == device_kind and timed(r)]
    same: dict[tuple, list[float]] = defaultdict(list)
    for r in measured:
        same[(group_key(r, "workload"), r.get("device"), r.get("recipe"))].append(float(r["speedup"]))
    errors = [abs(a - b) / b for speedups in same.values() for i, a in enumerate(speedups) for j, b in enumerate(speedups) if i != j]
    by_group: dict[str, set[float]] = defaultdict(set)
    for (group, _device, _recipe), speedups in same.items():
        by_group[group].add(float(np.median(speedups)))
    close = total = 0
    for speedups in by_group.values():
        values = sorted(speedups)
        for i in range(len(values)):
            for j in range(i + 1, len(values)):
                total += 1
                close += values[j] < NOISE_RATIO * values[i]
    return {
        "repeated_recipes": sum(1 for speedups in same.values() if len(speedups) > 1),
        "repeat_ape_mean": round(float(np.mean(errors)), 4) if errors else None,
        "repeat_ape_median": round(float(np.median(errors)), 4) if errors else None,
        "pairs_within_noise": round(close / total, 4) if total else None,
    }


def _by_band(actual: list[float], ape: list[float]) -> dict[str, dict]:
    """MAPE within bands of the measured speedup: a recipe 30x slower than the baseline predicted
    5x slower weighs as much in the MAPE as a 10% error on the recipe a search would keep."""
    bands = {}
    for low, high in SPEEDUP_BANDS:
        errors = [e for a, e in zip(actual, ape) if low <= a < high]
        if errors:
            bands[f"{low:g}-{high:g}"] = {"rows": len(errors), "mape": round(float(np.mean(errors)), 4)}
    return bands

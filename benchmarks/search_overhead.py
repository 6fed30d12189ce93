"""What a search spends on the CPU besides measuring: the cost model's fit (its boosters one at a
time, and side by side as `CostModel.fit` trains them; and the retrain after a candidate, the
store's model continued by WARM_ROUNDS trees, `CostModel.fit(base=)`), and a screening run of a cheap candidate
in a process whose heap holds a transformers import, with that heap left to the collector and
frozen as the worker freezes it (`bench.isolated._freeze_heap`).

    python benchmarks/search_overhead.py     # writes benchmarks/results/search-overhead-cpu-<date>.json
"""

from __future__ import annotations

import datetime as dt
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from agnitra import api  # noqa: E402
from agnitra.bench.variants.recipe import RecipeVariant  # noqa: E402
from agnitra.search.costmodel import model as costmodel  # noqa: E402
from agnitra.search.costmodel.seed import seed_rows  # noqa: E402
from agnitra.search.tuner import SearchConfig, screening_run  # noqa: E402
from agnitra.transforms.recipe import Recipe  # noqa: E402
from hf_families import build  # noqa: E402
from result_file import write_result  # noqa: E402

REPEATS = 5


def fit_seconds(rows: list[dict], threads: int) -> dict:
    costmodel.FIT_THREADS = threads
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        fitted = costmodel.CostModel.fit(rows)
        times.append(time.perf_counter() - started)
    return {"threads": threads, "median_s": round(statistics.median(times), 4), "runs_s": [round(t, 4) for t in times],
            "first_predictions": [p.to_dict() for p in fitted.predict(rows[:3])]}


def warm_fit_seconds(rows: list[dict]) -> dict:
    """The retrain after a candidate: rows plus a few of the searched workload's, weighted, from scratch and continued."""
    own = [dict(r, group="this run") for r in rows[:5]]
    weights = [1.0] * len(rows) + [5.0] * len(own)
    base = costmodel.CostModel.fit(rows)
    out = {}
    for label, kwargs in (("anew", {}), ("continued", {"base": base})):
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            costmodel.CostModel.fit(rows + own, weights=weights, **kwargs)
            times.append(time.perf_counter() - started)
        out[label] = {"median_s": round(statistics.median(times), 4), "runs_s": [round(t, 4) for t in times]}
    return {"threads": costmodel.FIT_THREADS, "rounds_anew": costmodel.ROUNDS, "rounds_continued": costmodel.WARM_ROUNDS, **out}


def screening_seconds(frozen: bool) -> dict:
    workload, device = build("gpt2", "small"), torch.device("cpu")
    report = api.describe_device(device)
    recipe = Recipe.of(("dynamic-int8", {"min_features": 16, "skip": ""}))
    screening_run(workload, device, report, SearchConfig(), [RecipeVariant(recipe)])  # warm: imports, first calls
    if frozen:
        gc.collect()
        gc.freeze()
    objects = len(gc.get_objects())
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        screening_run(workload, device, report, SearchConfig(), [RecipeVariant(recipe)])
        times.append(time.perf_counter() - started)
    if frozen:
        gc.unfreeze()
    return {"heap": "frozen" if frozen else "left to the collector", "objects_the_collector_walks": objects,
            "median_s": round(statistics.median(times), 4), "runs_s": [round(t, 4) for t in times]}


def main() -> None:
    import os

    rows = seed_rows("cpu")
    cores = os.cpu_count() or 1
    fits = [fit_seconds(rows, 1), fit_seconds(rows, max(1, min(4, cores)))]
    retrain = warm_fit_seconds(rows)
    screens = [screening_seconds(False), screening_seconds(True)]
    out = ROOT / "benchmarks" / "results" / f"search-overhead-cpu-{dt.date.today().isoformat()}.json"
    write_result(out, "agnitra.search-overhead/1", api.describe_device(torch.device("cpu")),
                 conditions={"cores": cores, "repeats": REPEATS, "fit_rows": len(rows), "fit_rows_from": "the shipped seed's CPU rows",
                             "screening": "gpt2 small (hf_families), dynamic-int8 against eager, SearchConfig() defaults: 20 timed calls, checks on",
                             "peer": "none: these are Agnitra's own overheads, before and after"},
                 fit=fits, fit_same_predictions=fits[0]["first_predictions"] == fits[1]["first_predictions"],
                 fit_speedup=round(fits[0]["median_s"] / fits[1]["median_s"], 3), retrain=retrain,
                 screening=screens, screening_saved_s=round(screens[0]["median_s"] - screens[1]["median_s"], 4))
    for f in fits:
        print(f"fit on {len(rows)} rows, {f['threads']} thread(s): {f['median_s']:.3f} s")
    print(f"retrain after a candidate: anew {retrain['anew']['median_s']:.3f} s, continued {retrain['continued']['median_s']:.3f} s")
    for s in screens:
        print(f"screening run, heap {s['heap']} ({s['objects_the_collector_walks']} objects): {s['median_s']:.3f} s")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

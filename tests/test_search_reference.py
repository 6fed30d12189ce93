"""On a GPU a search's speedups are taken against one reference baseline (the median of every
baseline run so far), not each run's own; on the CPU each run's own baseline stays."""

from __future__ import annotations

import torch

from agnitra.results import CandidateResult, Latency
from agnitra.search.budget import Budget
from agnitra.search.reference import ReferenceBaseline
from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy
from agnitra.search.strategies.enumerate import Enumerate
from agnitra.search.tuner import SearchConfig, search
from agnitra.transforms.recipe import Recipe, Step


def _latency(ms: float) -> Latency:
    return Latency(median=ms, p95=ms, min=ms, mean=ms, samples=20)


GRAPHS = {"steps": [{"transform": "cuda-graphs", "params": {"warmup": 3}}]}


def _result(name: str, baseline_ms: float, ms: float, recipe: dict = GRAPHS) -> CandidateResult:
    return CandidateResult(name, recipe, name, 1.0, "ok", latency_ms=_latency(ms), baseline_ms=baseline_ms, speedup=baseline_ms / ms)


def test_a_reference_only_on_the_gpu():
    assert ReferenceBaseline.for_device(torch.device("cpu")) is None
    assert isinstance(ReferenceBaseline.for_device(torch.device("cuda")), ReferenceBaseline)


def test_speedups_from_runs_with_a_drifting_baseline_come_out_on_one_scale():
    """Two candidates of steady times (0.20 and 0.30 ms) screened beside baselines that drifted
    (1.6 and 2.8 ms): against their runs' own, the slower one looks faster (5.6x vs 9.3x, as the
    held-out distilbert's did on an H200); against the reference, the order is their times'."""
    fast, slow = _result("fast", 1.13, 0.20), _result("slow", 2.8, 0.30)
    assert slow.speedup > fast.speedup  # the run's own baselines misrank them
    reference = ReferenceBaseline()
    for baseline_ms in (1.6, 1.13, 2.8):
        reference.add(baseline_ms)
    reference.add(None)  # a run that did not time its baseline adds nothing
    assert reference.reference_ms == 1.6
    reference.rescale(fast)
    reference.rescale(slow)
    assert fast.speedup == 1.6 / 0.20 and slow.speedup == 1.6 / 0.30
    assert fast.baseline_ms == 1.13 and slow.baseline_ms == 2.8  # each run's own kept
    failed = CandidateResult("failed", GRAPHS, "failed", 1.0, "failed", reason="boom")
    assert reference.rescale(failed).speedup is None
    launched = _result("launched from Python", 2.8, 0.5, {"steps": [{"transform": "compile", "params": {"mode": "default"}}]})
    assert reference.rescale(launched).speedup == 2.8 / 0.5  # its time moves with the host's, as the baseline's: its own run's ratio
    assert reference.rescale(_result("cro", 2.8, 0.5, {"steps": [{"transform": "compile", "params": {"mode": "reduce-overhead"}}]})).speedup == 1.6 / 0.5
    assert "replay a CUDA graph are against the median of 3 baseline run(s), 1.600 ms (they ranged 1.130-2.800 ms)" in reference.note()
    assert ReferenceBaseline().note() == ""


class _Told(Strategy):
    name = "told"

    def __init__(self, space):
        super().__init__(space)
        self.inner = Enumerate(space)
        self.told: list[float] = []

    def ask(self):
        return self.inner.ask()

    def tell(self, candidate, result):
        self.told.append(result.speedup)


def test_the_search_tells_and_ranks_speedups_against_the_reference():
    times = {1: (2.8, 0.30), 2: (1.13, 0.20), 4: (1.6, 0.25)}  # cuda-graphs(warmup=n): (its run's baseline, its median)

    class Runner:
        def ensure_started(self, limit):
            pass

        def call(self, fn, candidate, device_report, config, timeout):
            base, ms = times[candidate.recipe.steps[0].params["warmup"]]
            r = candidate.recipe
            return CandidateResult(r.name, r.to_dict(), r.key(), 1.0, "ok", latency_ms=_latency(ms), baseline_ms=base, speedup=base / ms)

    space = [Candidate(Recipe((Step("cuda-graphs", {"warmup": n}),)), 1.0) for n in (1, 2, 4)]
    strategy = _Told(space)
    reference = ReferenceBaseline()
    reference.add(2.0)  # the probe's
    outcome = search(strategy, Runner(), None, SearchConfig(candidate_timeout_s=30.0), Budget(100.0), lambda results: 0.0, reference=reference)
    # told against the median so far: (2.0, 2.8) -> 2.4; (2.0, 2.8, 1.13) -> 2.0; (..., 1.6) -> 1.8
    assert [round(s, 3) for s in strategy.told] == [round(2.4 / 0.30, 3), round(2.0 / 0.20, 3), round(1.8 / 0.25, 3)]
    assert [round(r.speedup, 3) for r in outcome.results] == [round(1.8 / ms, 3) for ms in (0.30, 0.20, 0.25)]  # ranked on one scale at the end
    assert any(n.startswith("screened speedups of recipes that replay a CUDA graph are against the median of 4 baseline run(s)") for n in outcome.notes)
    plain = _Told(space)
    search(plain, Runner(), None, SearchConfig(candidate_timeout_s=30.0), Budget(100.0), lambda results: 0.0)
    assert [round(s, 3) for s in plain.told] == [round(b / ms, 3) for b, ms in times.values()]  # the CPU's way: each run's own


def test_stored_gpu_rows_of_one_run_come_out_on_one_scale_and_cpu_rows_keep_their_own():
    """The cost model's rows: a GPU run's speedups against the median of its rows' baselines
    (rows recorded before the search did so carry each row's own run's ratio); CPU rows and
    rows of other runs are left as they are."""
    from agnitra.search.costmodel.dataset import on_one_scale

    def row(kind, group, baseline_ms, ms, status="ok"):
        return {"device_kind": kind, "group": group, "baseline_ms": baseline_ms, "median_ms": ms, "speedup": baseline_ms / ms if status == "ok" else None, "status": status}

    rows = [row("cuda", "a", 1.13, 0.20), row("cuda", "a", 2.8, 0.30), row("cuda", "a", 1.6, 0.25), row("cuda", "a", 2.0, 0.4, "timeout"),
            row("cuda", "b", 4.0, 1.0), row("cpu", "c", 2.8, 0.30), row("cpu", "c", 1.13, 0.20), dict(row("cuda", "a", 2.8, 0.5), recipe='[{"transform": "fuse-projections", "params": {}}]')]
    for r in rows[:7]:
        r["recipe"] = '[{"params": {"warmup": 3}, "transform": "cuda-graphs"}]'
    rows[5]["recipe"] = rows[6]["recipe"] = '[{"params": {"mode": "reduce-overhead"}, "transform": "compile"}]'
    on_one_scale(rows)
    # every baseline of the run counts (1.13, 2.8, 1.6, 2.0, 2.8: median 2.0), whatever its candidate
    assert [round(r["speedup"], 3) for r in rows[:3]] == [round(2.0 / 0.20, 3), round(2.0 / 0.30, 3), round(2.0 / 0.25, 3)]
    assert rows[3]["speedup"] is None  # not measured: nothing to rescale
    assert rows[4]["speedup"] == 4.0  # its own run
    assert rows[5]["speedup"] == 2.8 / 0.30 and rows[6]["speedup"] == 1.13 / 0.20  # the CPU's way
    assert rows[7]["speedup"] == 2.8 / 0.5  # launched from Python: its own run's ratio

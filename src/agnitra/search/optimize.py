"""One optimize run, anytime: baseline -> one queue of candidates and peers -> final run -> answer.

Everything that runs the model runs in a worker process (`bench.isolated`), within one budget
counted from when the user asked. The baseline is measured first (a model that cannot be
measured ends the run with the reason). Then one queue: the opener (on a GPU plain
`torch.compile`, on the CPU what the store recommends), the strategy's candidates and the peers
(`peers.PeerQueue`) take turns, and from the first verified candidate that beats the baseline on,
the run holds a best answer that only improves (`tuner.search`). What is left at the end goes to
one final interleaved run of the baseline, the fastest compile mode and other peer that passed and
the best finalists, with full runs, energy and correctness: the answer is chosen from that run,
and only if it beats the baseline. Where the final run cannot finish, or the run is interrupted,
the best verified result of the search is the answer, with its own run's figures. Where an LLM
advisor is asked (`search.advisor`), the question goes out once the space is known, the reply is
read after the baseline, and its valid recipes lead the queue.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from agnitra.bench import fork_server
from agnitra.bench.harness import BenchConfig, Harness
from agnitra.bench.heldout import baseline_problem
from agnitra.bench.isolated import KILLED_EXIT_S, InProcess, Worker, WorkerCrashed, WorkerError, WorkerTimeout, WorkloadSource
from agnitra.bench.variants.eager import Eager
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.device import out_of_memory
from agnitra.errors import UserError, first_line
from agnitra.results import BenchReport, CandidateResult, DeviceReport, OptimizeReport, VariantResult
from agnitra.search.advisor import Advice, AdvisorSettings, Asking
from agnitra.search.advisor.prompt import facts as advisor_facts
from agnitra.search.budget import Budget
from agnitra.search.final_reserve import SAFETY, FinalReserve
from agnitra.search.peers import COMPILE_PEERS, PeerQueue
from agnitra.search.ranking import MIN_GAIN, beats_baseline, final_lineup, rank, score
from agnitra.search.reference import ReferenceBaseline
from agnitra.search.run_folder import RunFolder
from agnitra.search.space import Candidate, recipe_space
from agnitra.search.costmodel.context import workload_row
from agnitra.search.strategies.base import SearchContext, Strategy, get_strategy
from agnitra.search.strategies.warm_start import led_by
from agnitra.search.tuner import SearchConfig, free_candidate, pareto_front, screening_run, screening_tolerances, search
from agnitra.search.verdict import common_failure, nothing_helped, screened_verdict, win_verdict
from agnitra.transforms.base import TransformContext
from agnitra.transforms.recipe import Recipe
from agnitra.verify import Tolerances
from agnitra.workloads.base import Workload
from agnitra.workloads.loaders import out_of_memory_error

BASELINE_SHARE = 0.5  # of the budget left: a baseline taking longer leaves no room for a search
MIN_BASELINE_S = 1.0  # left of the budget, at least, to start measuring the original model
HOTSPOT_RUNS, HOTSPOT_WARMUP = 3, 1  # the profiled run of the original model that times its hotspots


@dataclass
class OptimizeResult:
    model: torch.nn.Module
    recipe: Recipe
    report: OptimizeReport  # model: the answer (a decoder's carries its step functions)
    interrupted: BaseException | None = None  # the Ctrl-C or SIGTERM that ended the search: re-raised once the answer is saved


@dataclass
class FinalRun:
    """What the final run hands back from the worker: its report, and the recipe of every
    variant that is one (finalists and the peers that are compile modes)."""

    bench: BenchReport
    recipes: dict[str, dict[str, Any]] = field(default_factory=dict)


def baseline_median(variants: list[VariantResult]) -> float | None:
    """The median of a run's baseline, its first variant (None where it was not timed)."""
    base = variants[0] if variants else None
    return base.latency_ms.median if base is not None and base.status == "ok" and base.latency_ms else None


# ---- the worker's side -----------------------------------------------------------------------------


def probe_baseline(workload: Workload, device: torch.device, device_report: DeviceReport, config: SearchConfig, progress=None) -> BenchReport:
    """The original model measured alone; a model whose own output is not finite, or that runs out of
    memory on its inputs, is refused."""
    try:
        problem = baseline_problem(workload)
        report = None if problem else screening_run(workload, device, device_report, config, [], progress)
    except Exception as exc:
        if out_of_memory(exc):
            raise out_of_memory_error(workload, exc) from exc
        raise
    if problem:
        raise UserError(f"{problem}; fix the model or its inputs")
    if report.variants[0].status != "ok" and out_of_memory(report.variants[0].reason or ""):
        raise out_of_memory_error(workload, report.variants[0].reason)
    return report


def final_run(workload: Workload, device: torch.device, device_report: DeviceReport, peers: list[str], finalists: list[tuple[str, dict]], tolerances: Tolerances, progress=None) -> FinalRun:
    """Baseline, peers and finalists in one interleaved run with full measurements."""
    free_candidate(device)  # the final run compiles its variants afresh
    variants = [Eager(), *peers, *[RecipeVariant(Recipe.from_dict(recipe), name=name) for name, recipe in finalists]]
    harness = Harness(workload, device, device_report, BenchConfig(variants=variants, tolerances=tolerances, op_breakdown=False), progress)
    bench = harness.run()
    recipes = dict(finalists)
    # peers that are recipes (the compile modes) compete too: if one wins, its recipe is the answer
    recipes.update({v.name: v.recipe.to_dict() for v in harness.variants if isinstance(v, RecipeVariant) and v.name not in recipes})
    free_candidate(device)
    return FinalRun(bench, recipes)


# ---- the parent's side -----------------------------------------------------------------------------


@dataclass
class RunSetup:
    """Where results go and how candidates are isolated, decided before any work."""

    folder: RunFolder | None = None
    done: dict[str, CandidateResult] = field(default_factory=dict)  # reused from a resumed journal
    journal_warnings: list[str] = field(default_factory=list)
    source: WorkloadSource | None = None  # None: candidates run in this process
    in_process_reason: str = ""
    ray_slots: int = 0  # --executor ray: candidates measured on this many Ray evaluation slots at once; 0: one at a time in the worker


def run_optimize(workload: Workload, device: torch.device, device_report: DeviceReport, *, setup: RunSetup, **options) -> OptimizeResult:
    """One optimize run (`_run`); with `--executor ray` its evaluation slots are started first, so
    that they load while the graph is captured and the baseline measured, and killed whatever happens."""
    with _slot_pool(setup, device) as pool:
        return _run(workload, device, device_report, setup=setup, pool=pool, **options)


def _run(
    workload: Workload,
    device: torch.device,
    device_report: DeviceReport,
    *,
    pool,
    objective: str,
    budget: Budget,
    candidate_timeout_s: float,
    tolerances: Tolerances,
    transforms: list[str] | None,
    strategy: str,
    peers: list[str],
    setup: RunSetup,
    progress: Callable[[str, float], None] | None = None,
    advisor: AdvisorSettings | None = None,
) -> OptimizeResult:
    progress = progress or (lambda message, fraction: None)
    notes = list(setup.journal_warnings)
    if setup.source is not None:
        fork_server.warm(setup.source.device)  # its imports run while the graph is captured
    ir = captured_graph(workload, notes)
    op_kinds, signature = facts_of(ir)
    ctx = TransformContext(workload, device, op_kinds=op_kinds)
    space, skipped = recipe_space(ctx, allowed=set(transforms) if transforms else None)
    # asked now, read after the baseline's measurement: the call costs no time of its own
    asking = Asking(advisor, lambda: advisor_facts(workload, ir, device_report, space, skipped, objective), budget.total_s, setup.folder.path if setup.folder else None) if advisor else None
    # candidates are screened on one window of positions; the final run verifies all of them
    config = SearchConfig(candidate_timeout_s=candidate_timeout_s, tolerances=screening_tolerances(tolerances))
    runner = Worker(setup.source, progress) if setup.source is not None else InProcess(workload, device, progress)
    if setup.source is None:
        notes.append(f"candidates ran in this process, not in a worker: {setup.in_process_reason}; a candidate past its time limit is stopped only between Python steps")
    budget.mark("loading")
    with runner:
        progress("measuring the original model", 0.02)
        probe, probe_s = measure_baseline(runner, device_report, config, budget)
        reserve = FinalReserve(probe_s, probe.variants, budget, device.type == "cuda", restart_s=runner.start_s,
                               decoder=workload.decoder is not None, running=lambda: runner.running)
        budget.mark("original model")
        advice = _advice(asking, space, skipped, ctx, transforms, budget, notes)
        context = SearchContext(workload_row(workload, signature, device_report, device), advised=list(advice.candidates) if advice else [],
                                objective=objective, baseline_model_bytes=probe.variants[0].model_bytes if probe.variants else None)
        searcher = _searcher(strategy, space, signature, device, context, resumed=bool(setup.done), notes=notes)
        reference = ReferenceBaseline.for_device(device)
        if reference is not None:
            reference.add(baseline_median(probe.variants))
        queue = PeerQueue.of(peers, space, device.type)
        outcome = search(searcher, pool or runner, device_report, config, budget, reserve, setup.folder, setup.done, progress, reference, queue)
        if pool is not None:
            pool.stop()  # their devices and CPUs go back to the cluster before the final run is timed
            notes.append(evaluation_note(pool, outcome.results))
        notes += outcome.notes + ([reserve.note()] if reserve.note() else [])
        results = outcome.results
        budget.mark("search")
        reserved_s = reserve(results)  # what the search left for the final run and the answer
        kept = outcome.best or fastest_verified_peer(results)  # what the answer would be without a final run
        compared, finalists = fitting_lineup(*final_lineup(results, objective), kept, lambda lineup: reserve.needed(results, lineup) / SAFETY, budget, notes)
        final, final_failure = None, _why_no_final(outcome, compared + finalists, reserve.needed(results, compared + finalists), budget)
        if not final_failure:
            progress("final interleaved run: baseline, peers, finalists", 0.9)
            final, final_failure = _final(runner, device_report, [r.peer for r in compared], finalists, tolerances, budget, reserve.assembly(results))
        budget.mark("final run")
        notes += _worker_notes(runner)
    search_info = {
        "strategy": strategy,
        "budget_s": budget.total_s,
        "space_size": len(space),
        "evaluated": len(results),
        "unmeasured": outcome.unmeasured,
        "not_applicable": [{"transform": s.transform, "reason": s.reason} for s in skipped],
        "candidate_timeout_s": candidate_timeout_s,
        "resumed": bool(setup.done),
        "reused": sum(1 for r in results if r.key in setup.done),
        "isolation": "worker process" if setup.source is not None else f"in-process ({setup.in_process_reason})",
        "worker_starts": runner.starts,
        "peers": [r.peer for r in results if r.peer],
        "peers_s": round(queue.spent_s, 1),
        "best_compile": _best_compile(results),
        "finalists": [r.name for r in finalists],
        "first_improvement_s": outcome.first_improvement_s,
        "interrupted": outcome.interrupted is not None,
        "reserved_for_final_s": round(reserved_s, 1),
        "notes": notes,
    }
    if advice is not None:
        search_info["advisor"] = advice.to_dict(results)
    if pool is not None:
        search_info["evaluation"] = pool.summary()
    if final is None:
        return _screened_answer(workload, device, probe, signature, objective, results, outcome, final_failure, search_info, budget, progress)
    bench = with_hotspots(final.bench, signature)
    peer_names = [r.peer for r in compared]
    searched_beyond = {r.peer or r.name for r in results if r.faster_beyond_noise and r.passed}
    chosen = _choose(bench, list(final.recipes), objective, searched_beyond)
    if chosen is None:
        verdict = nothing_helped(results, finalists, bench) + common_failure(results)
        report = OptimizeReport(bench, objective, None, Recipe().to_dict(), 1.0, results, pareto_front(results), search_info, verdict)
        return _finish(report, budget, OptimizeResult(workload.model, Recipe(), report))
    recipe = Recipe.from_dict(final.recipes[chosen.name])
    baseline = bench.variants[0]
    speedup = baseline.latency_ms.median / chosen.latency_ms.median
    verdict = win_verdict(bench, chosen, peer_names, results)
    report = OptimizeReport(bench, objective, chosen.name, recipe.to_dict(), speedup, results, pareto_front(results), search_info, verdict)
    return _answer(workload, device, recipe, chosen.name, report, budget, progress)


def _slot_pool(setup: RunSetup, device: torch.device):
    """The Ray evaluation slots `--executor ray` measures candidates on (a context that kills them),
    or a context holding None: one worker, one candidate at a time."""
    if not setup.ray_slots:
        return contextlib.nullcontext()
    from agnitra.bench.ray_slots import SlotPool
    from agnitra.config import ray_task_cpus

    return SlotPool(setup.source, setup.ray_slots, ray_task_cpus(), 1 if device.type == "cuda" else 0)


def evaluation_note(pool, results: list[CandidateResult]) -> str:
    """Where the search's candidates were measured: the slots, how many at once, what was replaced."""
    summary = pool.summary()
    counts = Counter(r.measured_on["slot"] for r in results if r.measured_on)
    places = "; ".join(f"slot {p['slot']} on {p['host']} (node {p['node'][:8]}, pid {p['pid']}{', GPU ' + ','.join(p['gpus']) if p['gpus'] else ''})"
                       for p in summary["placements"])
    text = (f"evaluation: {sum(counts.values())} measurement(s) on {summary['slots_ran']} Ray slot process(es) for {summary['slots']} slot(s), "
            f"at most {summary['most_at_once']} at once ({summary['cpus_per_slot']:g} CPU and {summary['gpus_per_slot']} GPU each): {places or 'none loaded'}")
    if summary["asked"] > summary["slots"]:
        text += f"; {summary['asked']} slots were asked for, the cluster can hold {summary['slots']} beside this run"
    if summary["replaced"]:
        text += f"; replaced: {'; '.join(summary['replaced'])}"
    if summary["not_started"]:
        text += f"; not started: {'; '.join(summary['not_started'])}"
    return text


def _searcher(strategy: str, space: list[Candidate], signature: dict | None, device: torch.device, context: SearchContext, resumed: bool,
              notes: list[str]) -> Strategy:
    """The strategy, told the workload's features; the advisor's valid recipes go first, then the
    recipes the store recommends where it did not learn from the store itself (a resumed run keeps
    its first order, so its journal's results line up)."""
    first: list = []
    if not resumed:
        space, first = _warm_started(space, signature, device, notes)
    searcher = get_strategy(strategy)(space)
    notes += searcher.attach(context)
    if first and searcher.learned_from_store():  # the cost model learned from those measurements: its order, not theirs
        notes[:] = [n.replace(" measured first: ", " left to the cost model, which learned from them: ", 1) if n.startswith("warm start:") else n for n in notes]
        first = []
    return led_by(searcher, list(context.advised), first)


def _advice(asking: Asking | None, space: list[Candidate], skipped, ctx: TransformContext, transforms: list[str] | None, budget: Budget, notes: list[str]) -> Advice | None:
    """The advisor's reply, judged; what waiting for it took past the baseline is its own stage."""
    if asking is None:
        return None
    advice = asking.advice(space, skipped, ctx, set(transforms) if transforms else None)
    budget.mark("advisor")
    notes.append(advice.note())
    return advice


def _screened_answer(workload, device, probe, signature, objective, results, outcome, why: str, search_info, budget: Budget, progress) -> OptimizeResult:
    """The answer without a final run (it could not finish, or the run was interrupted): the best
    verified result of the search, with the figures of its own run beside the baseline."""
    bench = with_hotspots(probe, signature)
    if signature and not bench.workload.get("signature"):  # the store keys the workload by it, as a final run's report has it
        bench.workload["signature"] = {k: v for k, v in signature.items() if k != "measured"}
    bench.notes.append(f"final run: {why}")
    best = outcome.best if objective == "latency" else next(iter(rank(results, objective)), None)
    if best is None and objective == "latency":
        best = fastest_verified_peer(results)  # a compile mode that won in its own run beats returning the original
    if best is None:
        verdict = f"the final run did not run ({why}) and no candidate of the search beat the baseline with correct outputs; the original model is returned" + common_failure(results)
        report = OptimizeReport(bench, objective, None, Recipe().to_dict(), 1.0, results, pareto_front(results), search_info, verdict)
        return _finish(report, budget, OptimizeResult(workload.model, Recipe(), report, outcome.interrupted))
    recipe = Recipe.from_dict(best.recipe)
    verdict = screened_verdict(best, results, why)
    report = OptimizeReport(bench, objective, best.name, recipe.to_dict(), best.speedup, results, pareto_front(results), search_info, verdict)
    return _answer(workload, device, recipe, best.name, report, budget, progress, outcome.interrupted)


def _answer(workload, device, recipe: Recipe, name: str, report: OptimizeReport, budget: Budget, progress, interrupted=None) -> OptimizeResult:
    progress("building the answer", 0.97)
    prepared = RecipeVariant(recipe, name=name).prepare(workload, device)  # as the worker built what it verified
    model = prepared.model if prepared.model is not None else prepared.call
    return _finish(report, budget, OptimizeResult(model, recipe, report, interrupted))


def fastest_verified_peer(results: list[CandidateResult]) -> CandidateResult | None:
    """The fastest peer of the search that passed and beat the baseline beyond the noise in its own run."""
    won = [r for r in results if r.peer and r.passed and r.faster_beyond_noise and r.speedup]
    return max(won, key=lambda r: r.speedup) if won else None


def fitting_lineup(compared: list[CandidateResult], finalists: list[CandidateResult], best: CandidateResult | None, needed, budget: Budget,
                   notes: list[str]) -> tuple[list[CandidateResult], list[CandidateResult]]:
    """The final run's lineup cut to what the time left can hold (`needed(lineup)` seconds): the
    other finalists go first, then the peers other than a compile mode, then the compile mode;
    the best result of the search stays. What was left out is said."""
    dropped: list[str] = []
    while needed(compared + finalists) > budget.remaining():
        droppable = [r for r in finalists[1:][::-1] + [r for r in compared if r.peer not in COMPILE_PEERS] + compared + finalists[:1] if r is not best]
        if not droppable:
            break
        out = droppable[0]
        compared, finalists = [r for r in compared if r is not out], [r for r in finalists if r is not out]
        dropped.append(out.peer or out.name)
    if dropped:
        notes.append(f"final run: {', '.join(dropped)} left out to fit the {max(0.0, budget.remaining()):.0f} s left; their figures are their search runs'")
    return compared, finalists


def _why_no_final(outcome, lineup: list[CandidateResult], needed_s: float, budget: Budget) -> str:
    """Why the final run is not started ('' where it is): an interruption, nothing that passed to
    confirm, or less time left than it is expected to need (it would be stopped unfinished)."""
    if outcome.interrupted is not None:
        return "the run was interrupted"
    if not lineup:
        return "no candidate beat the original with verified outputs, and no peer passed: nothing to confirm"
    if budget.remaining() < needed_s / SAFETY:
        return f"it needed about {needed_s / SAFETY:.0f} s and {max(0.0, budget.remaining()):.0f} s of the budget were left"
    return ""


def _best_compile(results: list[CandidateResult]) -> dict | None:
    """The fastest compile mode that finished with correct outputs in the search, in its own run."""
    ok = [r for r in results if r.peer in COMPILE_PEERS and r.passed and r.speedup]
    if not ok:
        return None
    best = max(ok, key=lambda r: r.speedup)
    return {"peer": best.peer, "speedup": round(best.speedup, 4), "latency_ms": best.latency_ms.median if best.latency_ms else None}


def _worker_notes(runner) -> list[str]:
    notes = []
    restarted = getattr(runner, "restarted_because", [])
    if restarted:
        notes.append(f"worker: started afresh after {len(restarted)} candidate(s) that left its device state damaged ({restarted[0]})")
    left_behind = getattr(runner, "left_behind", [])
    if left_behind:
        notes.append(f"worker: {len(left_behind)} killed worker process(es) had not exited {KILLED_EXIT_S:.0f} s later (pid {', '.join(map(str, left_behind))}; "
                     "a process inside a GPU driver call cannot die until it returns); the search went on with a fresh one")
    return notes


def graph_facts(workload: Workload, notes: list[str], timed: bool = True) -> tuple[frozenset[str] | None, dict | None]:
    """The op kinds of the captured graph, which say what each transform could change here, and
    its signature: the static part finds the nearest stored workloads; the hotspot features
    (`measured`: time shares per op kind, the device's busy share) are timed here once, unless
    `timed` is off, and are what the cost model reads besides."""
    return facts_of(captured_graph(workload, notes, timed))


def captured_graph(workload: Workload, notes: list[str], timed: bool = True):
    """The captured IR with its hotspots timed (unless `timed` is off); None where it does not capture."""
    from agnitra.ir import capture_workload

    try:
        ir = capture_workload(workload)
    except Exception as exc:  # noqa: BLE001 - a model that does not capture is still searched, all of it
        notes.append(f"the graph was not captured ({first_line(exc)}); every transform was searched")
        return None
    if timed:
        _time_hotspots(ir, workload, notes)
    return ir


def facts_of(ir) -> tuple[frozenset[str] | None, dict | None]:
    """A captured graph's op kinds and signature (None, None where there is none)."""
    from agnitra.ir import signature

    if ir is None:
        return None, None
    return frozenset(node.kind for node in ir.nodes), signature(ir).to_dict()


def proposed_by(report: OptimizeReport) -> str | None:
    """Who proposed the answer: the advisor, a peer or the search (None: the original model)."""
    if report.chosen is None:
        return None
    name = Recipe.from_dict(report.recipe).name
    advised = {p["recipe"] for p in (report.search.get("advisor") or {}).get("proposals", []) if p["status"] != "rejected"}
    if name in advised:
        return "advisor"
    searched = [c for c in report.candidates if c.name == name or c.peer == report.chosen]
    if any(c.peer for c in searched):
        return "peer"
    return "agent" if any((c.predicted or {}).get("agent") for c in searched) else "search"


def agent_note(report: OptimizeReport) -> str:
    """For an answer the learning agent proposed (`ppo`): its parts with their predicted effect, and the measured speedup."""
    if report.search.get("proposed_by") != "agent":
        return ""
    found = next((c for c in report.candidates if c.name == Recipe.from_dict(report.recipe).name and (c.predicted or {}).get("agent")), None)
    if found is None:
        return ""
    parts = ", ".join(f"{p['choice']} x{p['speedup_factor']:.2f}" for p in found.predicted.get("choices", []))
    measured = f"; measured {report.speedup:.2f}x" if report.speedup else ""
    return f"agent: the answer was its {found.predicted['agent']} pick; part by part as predicted: {parts}{measured}"


def with_hotspots(bench: BenchReport, signature: dict | None) -> BenchReport:
    """The run's conditions with the hotspot features timed before the search (`hotspots`): the
    store keeps them with the run, apart from the workload's static signature."""
    if signature and signature.get("measured"):
        bench.conditions["hotspots"] = dict(signature["measured"])
    return bench


def _time_hotspots(ir, workload: Workload, notes: list[str]) -> None:
    """One short profiled run of the original model, its time written into the IR; a model that
    cannot be profiled is searched without hotspot features, and the notes say so."""
    from agnitra.ir.timing import attribute_time
    from agnitra.ort.session import OrtModule
    from agnitra.workloads.base import tensor_leaves

    if isinstance(workload.model, OrtModule):
        notes.append("hotspots: not timed (an ONNX model); the cost model reads its static signature only")
        return
    leaves = tensor_leaves(workload.example_inputs)
    device = leaves[0].device if leaves else torch.device("cpu")
    try:
        attribute_time(ir, workload.model, workload.model, workload.example_inputs, device, runs=HOTSPOT_RUNS, warmup=HOTSPOT_WARMUP)
    except Exception as exc:  # noqa: BLE001 - the search goes on without them
        notes.append(f"hotspots: not timed ({first_line(exc)}); the cost model reads the static signature only")
        for node in ir.nodes:
            node.time_us = None


def _warm_started(space: list, signature: dict | None, device: torch.device, notes: list[str]) -> tuple[list, list]:
    """Recipes that worked on the nearest workloads in the store go first (the space reordered,
    and those candidates, which `WarmStart` measures before any strategy's own order); the store
    is optional."""
    if signature is None or not space:
        return space, []
    from agnitra.search.recommend import recommend, warm_start
    from agnitra.store import open_store

    try:
        store = open_store()
        try:
            recommended = recommend(store, signature, device.type)
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - no store, no warm start: said
        notes.append(f"warm start: the store was not read ({first_line(exc)})")
        return space, []
    space, first = warm_start(space, recommended)
    if first:
        more = f"; and {len(first) - 3} more" if len(first) > 3 else ""
        notes.append(f"warm start: {len(first)} recipe(s) that passed on the nearest stored workloads measured first: {'; '.join(first[:3])}{more}")
    return space, [c for c in space if c.recipe.name in set(first)]


def _finish(report: OptimizeReport, budget: Budget, result: OptimizeResult) -> OptimizeResult:
    budget.mark("answer")
    report.search["proposed_by"] = proposed_by(report)
    said = agent_note(report)
    if said:
        report.search["notes"].append(said)
    if report.search.get("advisor") and report.search["proposed_by"]:
        report.verdict += "; proposed by " + {"advisor": "the advisor", "peer": "a peer", "search": "the search, not the advisor",
                                              "agent": "the learning agent, not the advisor"}[report.search["proposed_by"]]
    report.search["elapsed_s"] = round(budget.elapsed(), 1)
    report.search["time_s"] = dict(budget.phases)
    report.search["notes"].append(_time_note(budget, report.search.get("reserved_for_final_s")))
    return result


def _time_note(budget: Budget, reserved_s: float | None) -> str:
    """Where the budget went, in one line: each stage's seconds, what the search left for the
    final run and the answer against what they took, and what was not used."""
    stages = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in budget.phases.items())
    after = budget.phases.get("final run", 0.0) + budget.phases.get("answer", 0.0)
    kept = f"; the search kept {reserved_s:.1f} s for the final run and the answer, which took {after:.1f} s" if reserved_s is not None else ""
    return f"time: {stages}{kept}; {max(0.0, budget.remaining()):.1f} s of the {budget.total_s:.0f} s budget not used"


def measure_baseline(runner, device_report: DeviceReport, config: SearchConfig, budget: Budget) -> tuple[BenchReport, float]:
    """The baseline, first: a model that cannot be measured ends the run with the reason. Its run's
    seconds (the worker's start aside) come with it: what the final run spends on the baseline."""
    _check_budget_left(budget)
    try:
        runner.ensure_started(budget.remaining())
    except (WorkerTimeout, WorkerCrashed, WorkerError) as exc:
        raise UserError(f"the model could not be loaded in a worker process: {exc}; check that it loads (`agnitra bench`), or raise --budget") from None
    _check_budget_left(budget)
    limit = BASELINE_SHARE * budget.remaining()  # not a candidate: the run needs it, whatever --candidate-timeout says
    try:
        started = time.monotonic()
        return runner.call(probe_baseline, device_report, config, timeout=limit), time.monotonic() - started
    except WorkerError as exc:
        if exc.user_error:
            raise UserError(str(exc)) from None
        raise UserError(f"the original model could not be measured: {exc}; check that it runs on its example inputs (`agnitra bench`)") from None
    except WorkerTimeout:
        raise UserError(f"measuring the original model alone took longer than {limit:.0f} s (half of what was left of the budget); raise --budget, or lower --batch/--tokens") from None
    except WorkerCrashed as exc:
        raise UserError(f"the original model could not be measured: {exc}; check that it runs (`agnitra bench`), or lower --batch if memory ran out") from None


def _check_budget_left(budget: Budget) -> None:
    """A one-line error when loading the model (and starting its worker) left no time to measure it."""
    if budget.remaining() <= MIN_BASELINE_S:
        raise UserError(f"the {budget.total_s:.0f} s budget was spent before the original model could be measured (loading it took {budget.elapsed():.0f} s); raise --budget")


def _final(runner, device_report, peers, finalists, tolerances, budget: Budget, assembly_s: float) -> tuple[FinalRun | None, str]:
    timeout = budget.remaining() - assembly_s
    if timeout <= 1.0:
        return None, f"no time was left of the {budget.total_s:.0f} s budget"
    try:
        return runner.call(final_run, device_report, peers, [(r.name, r.recipe) for r in finalists], tolerances, timeout=timeout), ""
    except (WorkerTimeout, WorkerCrashed, WorkerError) as exc:
        return None, str(exc)


def _choose(bench: BenchReport, names: list[str], objective: str, searched_beyond: set[str] = frozenset()) -> VariantResult | None:
    """The finalist that did best in the final run, if it passed and beat the baseline: beyond the
    noise there, or by its median there where its own search run had it beyond the noise (the final
    run confirms; two runs faster, one of them beyond the noise, is not a tie)."""
    by_name = {v.name: v for v in bench.variants}
    baseline = bench.variants[0]
    best = None
    for name in names:
        v = by_name.get(name)
        if v is None or v.status != "ok" or v.correctness is None or not v.correctness.passed or baseline.status != "ok":
            continue
        speedup = baseline.latency_ms.median / v.latency_ms.median
        if not beats_baseline(v, speedup) and not (name in searched_beyond and speedup > MIN_GAIN):
            continue  # never slower than the baseline, nor equal within the noise
        if best is None or score(v, objective) < score(best, objective):
            best = v
    return best



"""The SDK: each function composes the stages; the CLI and (later) the service call only these."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Sequence

import torch

from agnitra import arguments
from agnitra.bench.harness import BenchConfig, Progress
from agnitra.bench.harness import benchmark as run_harness
from agnitra.config import Settings, load_settings
from agnitra.device import out_of_memory, resolve_device
from agnitra.errors import UserError, first_line
from agnitra.results import BenchReport, DeviceReport, InspectReport, OptimizeReport, ProfileReport
from agnitra.telemetry.ceilings import load_or_measure
from agnitra.telemetry.profile import profile_workload
from agnitra.telemetry.signature import device_signature, signature_id
from agnitra.workloads.base import Workload
from agnitra.workloads.loaders import out_of_memory_error
from agnitra.workloads.prepare import parse_dtype, prepare_workload
from agnitra.workloads.training_mode import training_mode_note
from agnitra.search.settings import SearchSettings
from agnitra.verify import Tolerances


def describe_device(device: torch.device | str | None = None, settings: Settings | None = None, refresh: bool = False) -> DeviceReport:
    """Signature and measured ceilings (cached per signature under the cache dir)."""
    settings = settings or load_settings()
    device = device if isinstance(device, torch.device) else resolve_device(device or settings.device)
    signature = device_signature(device)
    ceilings = load_or_measure(device, signature, settings.cache_path, refresh=refresh)
    return DeviceReport(name=signature["name"], kind=device.type, signature={**signature, "id": signature_id(signature)}, ceilings=ceilings)


def zoo_build(name: str, size: str = "small", device: torch.device | str | None = None, progress: Progress | None = None) -> tuple[Path, dict]:
    """Train a zoo model that is built by training (`tinylm-py`) and cache it; returns the
    checkpoint's path and its training record (held-out and unigram perplexity)."""
    from agnitra.workloads.zoo.tinylm_py import NAME, build_trained

    if name.removeprefix("zoo:") != NAME:
        raise UserError(f"zoo build: only {NAME} is built by training; the other zoo models are built from their configs when used")
    dev = device if isinstance(device, torch.device) else resolve_device(device or load_settings().device)
    return build_trained(size, dev, progress)


def zoo_entries():
    """The built-in workloads (name, task, description, parameter counts)."""
    from agnitra.workloads.registry import zoo_entries as entries

    return entries()


def transforms():
    """Every registered transform (name, stage, parameters, description, what it needs)."""
    from agnitra.transforms import all_transforms

    return all_transforms()


def recipe_variant(text: str):
    """A recipe (a recipe.json path, or written inline) as one more variant for `benchmark`."""
    from agnitra.bench.variants.recipe import RecipeVariant
    from agnitra.transforms.recipe import Recipe

    recipe = Recipe.load_or_parse(text)
    return RecipeVariant(recipe, name=f"recipe: {recipe.name}")


def versions() -> dict[str, str | None]:
    """Versions of Agnitra and what it runs on."""
    from agnitra.telemetry.signature import software_versions

    return software_versions()


def profile(model, example_inputs=None, *, device=None, runs: int = 50, warmup: int = 5, settings: Settings | None = None, **load_options) -> ProfileReport:
    """Operator table, latency, peak memory and NVML telemetry of one workload."""
    _check_repeats(runs, warmup)
    _check_load_options(device, load_options)
    workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    return profile_workload(workload, dev, describe_device(dev, settings), runs=runs, warmup=warmup)


def benchmark(
    model,
    example_inputs=None,
    *,
    variants: Sequence[str] = ("eager",),
    device=None,
    runs: int | None = None,
    warmup: int | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    check: bool = True,
    op_breakdown: bool = True,
    threshold: float | None = None,
    check_positions: int | None = None,
    progress: Progress | None = None,
    settings: Settings | None = None,
    store: bool = True,
    **load_options,
) -> BenchReport:
    """Measure several variants of one workload side by side in one interleaved run (recorded in
    the measurement store unless `store=False`, `--no-store`)."""
    from agnitra.bench.variants import Variant

    names = [v if isinstance(v, Variant) else v.strip() for v in variants if isinstance(v, Variant) or v.strip()]
    if not names:
        raise UserError("no variants given; e.g. --variants eager,compile")
    arguments.each_one_of("--variants", [n for n in names if not isinstance(n, Variant)], _variant_names(), "variant")
    _check_repeats(runs, warmup)
    arguments.non_negative("--temperature", temperature)
    arguments.count("--top-k", top_k)
    arguments.positive("--threshold", threshold)
    arguments.count("--check-positions", check_positions)
    _check_load_options(device, load_options)
    _check_named_store(store)
    trained = training_mode_note(model)
    if trained:
        warnings.warn(trained, UserWarning, stacklevel=2)
    workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    config = BenchConfig(variants=names, runs=runs, warmup=warmup, temperature=temperature, top_k=top_k, check=check, op_breakdown=op_breakdown, threshold=threshold,
                         tolerances=Tolerances(check_positions=check_positions))
    report = run_harness(workload, dev, describe_device(dev, settings), config, progress)
    original = next((v for v in report.variants if v.name == "eager"), None)
    if original is not None and original.status == "failed" and out_of_memory(original.reason or ""):
        raise out_of_memory_error(workload, original.reason)
    if trained:
        report.notes.insert(0, trained)
    _record_in_store(report, report.notes, store)
    return report


def check(
    model,
    example_inputs=None,
    *,
    baseline: str | Path,
    variant: str | None = None,
    device=None,
    runs: int | None = None,
    max_latency_regression: float = 0.10,
    max_quality_drop: float = 0.01,
    progress: Progress | None = None,
    settings: Settings | None = None,
    **load_options,
):
    """The release gate: the baseline report's recipe measured again beside the eager original and
    judged against the report (agnitra.gate); a GateResult, `passed` False on a regression."""
    from agnitra.bench.variants import get_variant
    from agnitra.bench.variants.recipe import RecipeVariant
    from agnitra.gate import GateResult, judge, read_baseline
    from agnitra.transforms.recipe import Recipe

    _check_repeats(runs, None)
    arguments.positive("--max-latency-regression", max_latency_regression)
    arguments.positive("--max-quality-drop", max_quality_drop)
    _check_load_options(device, load_options)
    base = read_baseline(baseline, variant)
    workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    device_report = describe_device(dev, settings)
    if device_report.name != base.device:
        raise UserError(f"the baseline was measured on {base.device}, this run is on {device_report.name}: latencies of two machines do not compare; make the baseline here")
    recipe = Recipe.from_dict(base.recipe)
    variants = [get_variant("eager")] + ([RecipeVariant(recipe, name=f"recipe: {recipe.name}")] if recipe.steps else [])
    report = run_harness(workload, dev, device_report, BenchConfig(variants=variants, runs=runs, op_breakdown=False), progress)
    row = report.variants[-1]
    if row.status != "ok" or row.latency_ms is None:
        return GateResult(False, f"the recipe did not run: {row.reason}", base.variant, base.recipe, base.latency_ms, float("nan"), float("nan"), base.metric, base.quality, None, None, report)
    correctness = row.correctness if recipe.steps else None
    if correctness is not None and not correctness.passed:
        return GateResult(False, f"the recipe fails verification now: {row.reason}", base.variant, base.recipe, base.latency_ms, row.latency_ms.median,
                          row.latency_ms.median / base.latency_ms - 1, correctness.metric, base.quality, correctness.value, None, report)
    metric, value = (correctness.metric, correctness.value) if correctness else (base.metric, None)
    passed, reason, change, loss = judge(base, row.latency_ms.median, metric, value, max_latency_regression, max_quality_drop)
    return GateResult(passed, reason, base.variant, base.recipe, base.latency_ms, row.latency_ms.median, change, metric, base.quality, value, loss, report)


def layout(
    model,
    example_inputs=None,
    *,
    transforms: str = "sparsity:2:4,quant:int4",
    modes: Sequence[str] = ("none", "once", "iterative", "gathered"),
    device=None,
    solve_seconds: float = 60.0,
    calibration_batches: int = 8,
    runs: int | None = None,
    l2: bool = False,
    check_positions: int | None = None,
    out: str | Path | None = None,
    progress: Progress | None = None,
    settings: Settings | None = None,
    **load_options,
) -> dict:
    """Layout re-optimisation (agnitra.relayout): the state transforms applied in each mode to a copy
    (none, permuted once, re-permuted before each), each mode's model served by the kernel of its
    weight format where one applies, measured and verified beside the original in one interleaved
    run (latency, memory, energy per item on a GPU, the L2 hit rate through ncu where `l2` and it
    can read the counters) and judged on the gates (a decoder's quality on `check_positions`
    teacher-forced positions of held-out text); the report (a dict, `agnitra.layout/2`), and
    with `out` its files (layout.json, layout.csv, metrics.json, report.html). The model the user
    gave is left as it is."""
    from agnitra.bench.variants import get_variant
    from agnitra.bench.variants.given import GivenModel
    from agnitra.models.kv_cache import cache_bytes
    from agnitra.relayout.measure import mode_entries
    from agnitra.relayout.pipeline import MODES, reported_notes, run_layout
    from agnitra.relayout.serve import serve, served_kernel
    from agnitra.transforms.permutation.cache import PermutationCache
    from agnitra.transforms.permutation.steps import parse_steps

    steps = parse_steps(transforms)
    arguments.each_one_of("--modes", list(modes), MODES, "mode")
    arguments.positive("--solve-seconds", solve_seconds)
    arguments.count("--calibration-batches", calibration_batches)
    arguments.count("--check-positions", check_positions)
    _check_repeats(runs, None)
    _check_load_options(device, load_options)
    folder = None
    if out is not None:
        from agnitra.fileio import ensure_writable_dir

        folder = ensure_writable_dir(out)  # before any work: a folder that cannot take the report would lose the run
    workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    _check_kv_steps(workload.model, steps)
    calibration = workload.calibration_inputs(calibration_batches)
    cache = PermutationCache((settings or load_settings()).cache_path / "layout")
    runs_by_mode = {}
    for mode in modes:
        if progress:
            progress(f"layout: mode {mode}", 0.1 + 0.5 * len(runs_by_mode) / len(modes))
        runs_by_mode[mode] = run_layout(workload.model, calibration, steps, mode, solve_seconds=solve_seconds, cache=cache)
    kernel, no_kernel = served_kernel([s for s in steps if s.kind != "kv"])  # a kv step is served by its compressed cache
    notes = [no_kernel] if no_kernel else []
    notes += reported_notes(runs_by_mode.values())
    l2_readings = _layout_l2(model, load_options, workload, dev, runs_by_mode, kernel, folder, notes, progress) if l2 else {}
    if not l2 and dev.type == "cuda":
        notes.append("L2 hit rate: not measured (pass --l2: ncu profiles each model in a child process, about a minute each)")
    served = {}
    for mode, run in runs_by_mode.items():
        run.model, served[mode] = serve(run.model, workload, dev, kernel)
        compressed = [s.step for s in run.steps if s.cache_bytes_after is not None and s.cache_bytes_after != s.cache_bytes_before]
        if compressed:  # the KV steps are served by the compressed cache they installed
            served[mode] = "; ".join([said for said in (served[mode],) if said] + [f"served by the compressed KV cache ({', '.join(compressed)})"])
    notes += sorted({said for said in served.values() if said and not said.startswith("served by")})
    variants = [get_variant("eager")] + [GivenModel(f"layout {mode}", run.model) for mode, run in runs_by_mode.items()]
    report = run_harness(workload, dev, describe_device(dev, settings), BenchConfig(variants=variants, runs=runs, op_breakdown=False, energy_seconds=3.0,
                                                                                     tolerances=Tolerances(check_positions=check_positions)), progress)
    original, mode_docs = mode_entries(report, runs_by_mode, served, l2_readings, cache_bytes(workload.model))
    doc = {"schema": "agnitra.layout/2", "workload": report.workload, "device": report.device.name if hasattr(report.device, "name") else None,
           "transforms": transforms, "solve_seconds": solve_seconds, "calibration": _calibration_said(workload, calibration),
           "original": original, "modes": mode_docs, "notes": notes + list(report.notes)}
    if folder is not None:
        from agnitra.report.layout_files import write_layout_report

        write_layout_report(doc, folder)
    return doc


def _check_kv_steps(model, steps) -> None:
    """A KV-cache step whose groups do not divide the model's head size ends the run before any
    work, in one line naming the sizes that do; a model with no cache it can compress has its kv
    steps refused in the report (the other steps run)."""
    from agnitra.transforms.permutation import kv

    for step in steps:
        why = kv.refusal(model, step) if step.kind == "kv" else ""
        if why.startswith("groups of"):
            raise UserError(f"--transform {step.text}: {why}")


def _layout_l2(model, load_options: dict, workload: Workload, dev: torch.device, runs_by_mode: dict, kernel, folder: Path | None, notes: list[str], progress) -> dict:
    """Each mode's L2 hit rate and the original's, through ncu in child processes (CUDA only)."""
    if dev.type != "cuda":
        return {}
    from agnitra.bench.isolated import workload_source
    from agnitra.relayout.l2 import l2_of

    source, why = workload_source(model, load_options, workload, dev)
    if source is None:
        notes.append(f"L2 hit rate: not measured ({why})")
        return {}
    if progress:
        progress("layout: L2 hit rates through ncu", 0.6)
    models = {"original": (None, None), **{mode: (run.model, kernel) for mode, run in runs_by_mode.items()}}
    return l2_of(source, models, folder)


def _calibration_said(workload: Workload, calibration: list[tuple]) -> str:
    """What the layout's activation statistics were gathered on, for its report."""
    shapes = " x ".join(str(list(t.shape)) for t in calibration[0] if isinstance(t, torch.Tensor))
    where = "the workload's training data (never the held-out data it is judged on)" if workload.calibration else "the example inputs and fresh inputs like them"
    return f"{len(calibration)} batch(es) of {shapes} from {where}"


def _strategy_names() -> list[str]:
    from agnitra.search.strategies import STRATEGIES

    return sorted(STRATEGIES)


def _check_named_store(store: bool) -> None:
    """A store the user named (AGNITRA_DB_URL, `db_url`) that cannot be opened ends the run before
    any work, in one line: its measurements would not be recorded where they asked. `--no-store`
    (store=False) runs without it; the default store's failures stay notes (`_record_in_store`)."""
    if store and load_settings().db_url:
        from agnitra.store import open_store
        from agnitra.store.db import held_elsewhere

        try:
            open_store(otherwise="pass --no-store").close()
        except UserError as exc:
            if not held_elsewhere(exc):  # a store another process holds now is tried again at the end
                raise


def _record_in_store(report, notes: list[str], store: bool = True) -> None:
    """Every measured run goes to the store unless --no-store; a store that cannot take it is said, never fatal."""
    from agnitra.store import open_store, record_report

    if not store:
        return
    try:
        opened = open_store(otherwise="pass --no-store")
        try:
            with opened.session() as session:
                record_report(session, report.to_dict())
        finally:
            opened.close()
    except UserError as exc:  # the store named, what is wrong and the fix
        notes.append(f"store: this run was not recorded: {exc}")
    except Exception as exc:  # noqa: BLE001 - the measurements are in the report either way
        notes.append(f"store: this run was not recorded ({first_line(exc)})")


def recommend(model, example_inputs=None, *, device=None, limit: int = 5, settings: Settings | None = None, **load_options):
    """The recipes that passed verification on the stored workloads nearest to this one (by static
    signature), on this kind of device, each with its measured speedup and quality."""
    from agnitra.ir import capture_workload, signature
    from agnitra.search.costmodel.context import workload_row
    from agnitra.search.recommend import recommend as nearest_recipes
    from agnitra.search.recommend import with_predictions
    from agnitra.store import open_store

    arguments.count("--limit", limit)
    _check_load_options(device, load_options)
    workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    query = signature(capture_workload(workload)).to_dict()
    store = open_store()
    try:
        found = nearest_recipes(store, query, dev.type, limit=limit)
        with_predictions(found, store, workload_row(workload, query, describe_device(dev, settings), dev))
        return found
    finally:
        store.close()


def costmodel_train(datasets: Sequence[str | Path] | None = None, *, device_kind: str | None = None, out: str | Path | None = None, settings: Settings | None = None):
    """Train the cost model on the store's measurements (or on dataset CSVs) and save it (default:
    costmodel.json in the cache dir). Returns the model and its path."""
    from agnitra.search.costmodel import CostModel

    skipped: list[str] = []
    rows = _costmodel_rows(datasets, device_kind, skipped)
    model = CostModel.fit(rows)
    if skipped:
        model.notes.append(f"{len(skipped)} damaged row(s) of the store left out, e.g. {skipped[0]}")
    path = Path(out) if out else (settings or load_settings()).cache_path / "costmodel.json"
    try:
        return model, model.save(path)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}; choose another --out") from None


def costmodel_eval(datasets: Sequence[str | Path] | None = None, *, device_kind: str | None = None, by: str = "workload", out: str | Path | None = None, progress: Progress | None = None):
    """Leave-one-group-out evaluation (a workload at one size, or a whole family): MAPE of the
    speedup, Kendall's tau within each group, the pass classifier, per device kind; also written
    to `out` as JSON if given."""
    import json

    from agnitra.fileio import atomic_write_text
    from agnitra.search.costmodel.evaluate import leave_one_out

    arguments.one_of("--by", by, ("workload", "family"), "grouping")
    evaluation = leave_one_out(_costmodel_rows(datasets, device_kind), by=by, progress=progress)
    if out is not None:
        try:
            atomic_write_text(out, json.dumps(evaluation.to_dict(), indent=2) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write {out}: {exc.strerror or exc}; choose another --out") from None
    return evaluation


def _costmodel_rows(datasets, device_kind: str | None, skipped: list[str] | None = None) -> list[dict]:
    from agnitra.search.costmodel import load_rows
    from agnitra.store import open_store

    if device_kind is not None:
        arguments.one_of("--device-kind", device_kind, ("cpu", "cuda"), "device kind")
    if datasets:
        rows = load_rows(datasets=list(datasets), device_kind=device_kind)
        source = ", ".join(map(str, datasets))
    else:
        store = open_store()
        try:
            rows = load_rows(store, device_kind=device_kind, skipped=skipped)
        finally:
            store.close()
        source = "the store"
    if not rows:
        raise UserError(f"no recipe measurements{' on ' + device_kind if device_kind else ''} in {source}; run `agnitra collect` (or `agnitra optimize`) first, or give --dataset")
    return rows


def agent_train(datasets: Sequence[str | Path] | None = None, *, steps: int = 20000, device_class: str | None = None, settings: Settings | None = None):
    """Train the learning agent for a device class (default: this machine's) on the store's
    measurements (or dataset CSVs): behaviour cloning of each run's best recipe, then `steps` of
    PPO on the cost model; saved as the next version under the cache dir. Returns the training
    summary and the policy's record path."""
    from agnitra.search.agent.policy import policy_folder
    from agnitra.search.agent.train import train_policy

    arguments.count("--steps", steps, minimum=0)
    name, rows = _agent_rows(datasets, device_class)
    trained = train_policy(rows, steps)
    folder = policy_folder((settings or load_settings()).cache_path, name)
    try:
        return trained, trained.policy.save(folder, name, trained.record())
    except OSError as exc:
        raise UserError(f"cannot write the policy under {folder}: {exc.strerror or exc}; set AGNITRA_CACHE_DIR to a writable folder") from None


def agent_eval(datasets: Sequence[str | Path] | None = None, *, workloads: Sequence[str] | None = None, device_class: str | None = None, settings: Settings | None = None):
    """The newest saved policy of a device class on each stored run's workload: its greedy
    recipe among the recipes measured there, against plain torch.compile and the best measured."""
    from agnitra.search.agent.evaluate import evaluate
    from agnitra.search.agent.policy import latest

    name, rows = _agent_rows(datasets, device_class, need_training=False)
    policy = latest((settings or load_settings()).cache_path, name)
    if policy is None:
        raise UserError(f"no saved policy for {name}; train one with `agnitra agent train --device-class {name}`")
    wanted = [w for item in workloads or [] for w in item.split(",") if w] or None
    found = evaluate(policy, rows, name, wanted)
    if wanted and not found.workloads and not found.unreachable:
        raise UserError(f"none of {', '.join(wanted)} is among the measured workloads on {name}")
    return found


def _agent_rows(datasets, device_class: str | None, need_training: bool = True) -> tuple[str, list[dict]]:
    """The device class (checked; default this machine's) and its rows; the extra checked first
    where training needs it."""
    from agnitra.search.agent.policy import check_class, class_here, rows_of_class
    from agnitra.search.agent.train import sb3
    from agnitra.search.costmodel import load_rows
    from agnitra.store import open_store

    name = device_class or class_here("cuda" if torch.cuda.is_available() else "cpu")
    check_class(name)
    if need_training:
        sb3()
    if datasets:
        rows, source = load_rows(datasets=list(datasets)), ", ".join(map(str, datasets))
    else:
        store = open_store()
        try:
            rows, source = load_rows(store), "the store"
        finally:
            store.close()
    rows = rows_of_class(rows, name)
    if not rows:
        raise UserError(f"no recipe measurements on {name} in {source}; run `agnitra collect` (or `agnitra optimize`) first, or give --dataset")
    return name, rows


def collect(
    entries: Sequence,
    *,
    device=None,
    sample: int = 16,
    budget_per_workload: str | float = "3m",
    candidate_timeout: str | float = "90s",
    seed: int = 0,
    transforms: Sequence[str] | None = None,
    dataset: str | Path | None = None,
    progress: Progress | None = None,
    settings: Settings | None = None,
    recipes: Sequence[str] | None = None,
):
    """Measure a designed sample of recipes on each workload (`search.collect.PlanEntry`s, or
    model specs), or the named `recipes` (inline or recipe.json paths) on every one, record each
    workload's run in the store, and write the dataset (every stored measurement with its
    features) to `dataset` if given. A workload that cannot be built or
    measured is kept with its reason and the others go on. Returns the collected workloads."""
    from agnitra.bench.isolated import workload_source
    from agnitra.search.budget import Budget
    from agnitra.search.collect import CollectedWorkload, PlanEntry, collect_workload
    from agnitra.transforms.recipe import Recipe

    arguments.count("--sample", sample)
    per_workload_s = parse_duration(budget_per_workload, "--budget-per-workload")
    timeout_s = parse_duration(candidate_timeout, "--candidate-timeout")
    plan = [e if isinstance(e, PlanEntry) else PlanEntry(str(e)) for e in entries]
    _check_transform_names(SearchSettings(transforms=transforms))
    named = [Recipe.load_or_parse(text) for text in recipes or ()]  # a bad recipe: one line, before anything is measured
    if not plan:
        raise UserError("nothing to collect: name model specs, or use --plan")
    collected = []
    for i, entry in enumerate(plan):
        done = CollectedWorkload(entry)
        collected.append(done)
        say = (lambda message, fraction, i=i: progress(f"[{i + 1}/{len(plan)}] {entry.label()}: {message}", (i + fraction) / len(plan))) if progress else None
        try:
            clock = Budget(per_workload_s)
            options = entry.options()
            workload, dev = prepare_workload(entry.spec, device=device, **options)
            source, _reason = workload_source(entry.spec, options, workload, dev)
            done.report = collect_workload(workload, dev, describe_device(dev, settings), sample=sample, budget=clock, seed=seed + i,
                                           source=source, tolerances=Tolerances(), candidate_timeout_s=timeout_s,
                                           transforms=list(transforms) if transforms else None, recipes=named or None, progress=say)
        except UserError as exc:
            done.error = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - one workload's failure is kept, the others collected
            done.error = f"internal error: {first_line(exc)}"
            continue
        _record_in_store(done.report, done.notes)
    if dataset is not None:
        store_dataset(dataset)
    return collected


def collect_plan(device=None, generated: int = 12, seed: int = 0, part: str = "1/1", families: Sequence[str] | None = None, zoo: bool = True) -> list:
    """The designed collection plan for this device (`search.collect.default_plan`); `part`
    "k/n": the k-th of n interleaved parts of it; `families`: the generated families drawn from
    (mlp, conv, tfm, lm; default mlp, conv, tfm); `zoo` off: the generated models alone."""
    from agnitra.search.collect import FAMILIES, default_plan
    from agnitra.workloads.generated import PATTERNS

    k, _, n = part.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise UserError(f"--plan-part must be K/N with 1 <= K <= N (e.g. 2/3), got {part!r}")
    unknown = [f for f in families or () if f not in PATTERNS]
    if unknown:
        raise UserError(f"unknown generated famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; choose from {', '.join(PATTERNS)}")
    return default_plan(resolve_device(device or load_settings().device).type, generated, seed, (int(k), int(n)), tuple(families or FAMILIES), zoo)


def collect_entries(specs: Sequence[str], batches: Sequence[int] = (), tokens: int | None = None) -> list:
    """Plan entries for named specs, at each batch size given (else at each spec's default);
    `tokens`: decoders' new tokens per generation."""
    from agnitra.search.collect import PlanEntry

    return [PlanEntry(spec, batch=b, tokens=tokens) for spec in specs for b in (list(batches) or [None])]


def store_dataset(path: str | Path, device_kind: str | None = None) -> tuple[int, str, list[str]]:
    """Every stored candidate measurement with its features (workload signature, recipe, device)
    as one CSV: the cost model's training set. Returns the row count, the store's URL and the
    damaged rows left out."""
    from agnitra.store import open_store
    from agnitra.store.io import export_dataset

    store = open_store()
    try:
        skipped: list[str] = []
        return export_dataset(store, path, device_kind=device_kind, skipped=skipped), store.url, skipped
    finally:
        store.close()


def store_import(paths: Sequence[str | Path]):
    """Earlier run folders (their report.json) into the store; returns what was imported, what was
    there already and what was skipped with the reason."""
    from agnitra.store import import_runs, open_store

    store = open_store()
    try:
        return import_runs(store, list(paths))
    finally:
        store.close()


def store_export(path: str | Path) -> tuple[int, str, list[str]]:
    """Every measurement in the store as one CSV; returns the row count and the store's URL."""
    from agnitra.store import export_csv, open_store

    store = open_store()
    try:
        skipped: list[str] = []
        return export_csv(store, path, skipped), store.url, skipped
    finally:
        store.close()


def store_info() -> dict:
    from agnitra.store import counts, open_store
    from agnitra.store.db import safe_url

    store = open_store()
    try:
        return {"url": safe_url(store.url), "revision": store.revision(), **counts(store)}
    finally:
        store.close()


def inspect(model, example_inputs=None, *, device=None, runs: int = 10, warmup: int = 3, timed: bool = True, settings: Settings | None = None, **load_options) -> InspectReport:
    """Capture the graph, annotate costs and measured time, roll up hotspots, compute the signature."""
    _check_repeats(runs, warmup)
    _check_load_options(device, load_options)
    import datetime as dt

    from agnitra.ir import annotate_bounds, capture_workload, module_hotspots, signature
    from agnitra.ir.timing import attribute_time
    from agnitra.ort.session import OrtModule
    from agnitra.telemetry.signature import software_versions

    workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    device_report = describe_device(dev, settings)
    ir = capture_workload(workload)
    ir.device = device_report.name
    annotate_bounds(ir, device_report.ceilings, workload.dtype)
    if timed and isinstance(workload.model, OrtModule):
        from agnitra.ir.onnx_timing import attribute_onnx_time

        attribute_onnx_time(ir, workload.model, workload.example_inputs, dev, runs=runs)
    elif timed:
        attribute_time(ir, workload.model, workload.model, workload.example_inputs, dev, runs=runs, warmup=warmup)
    timing = {}
    if ir.timing:
        t = ir.timing
        timing = {"total_us": t["step_us"], "attributed_share": t["attributed_share"], "measured_ms": t["measured_ms"], "resource": t["resource"], "device_busy_ms": t["device_busy_ms"]}
    return InspectReport(
        workload={"name": workload.name, "source": workload.source, "task": workload.task.value, "weights": workload.weights, "params": workload.param_count(), "dtype": str(workload.dtype).replace("torch.", ""), "unit": "one decode step (model forward)" if workload.decoder else "one forward call"},
        device=device_report,
        ir=ir,
        hotspots=module_hotspots(ir, device_report.ceilings, workload.dtype),
        signature=signature(ir).to_dict(),
        timing=timing,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        versions=software_versions(),
    )


def write_reports(report: BenchReport | ProfileReport | InspectReport, out_dir: str | Path) -> dict[str, Path]:
    from agnitra.report.files import write_bench_report, write_profile_report

    if isinstance(report, InspectReport):
        from agnitra.report.inspect_files import write_inspect_report

        return write_inspect_report(report, Path(out_dir))
    if isinstance(report, OptimizeReport):
        from agnitra.report.optimize_report import write_optimize_report

        return write_optimize_report(report, Path(out_dir))
    writer = write_bench_report if isinstance(report, BenchReport) else write_profile_report
    return writer(report, Path(out_dir))


def tune_matmul(shape: tuple[int, int, int], *, dtype: str = "bf16", runs: int = 20, device=None, kernel: str = "matmul", force: bool = True, max_trials: int = 40, progress=None, settings: Settings | None = None):
    """Autotune the matmul template for one problem; the result is cached for this device."""
    for size in shape:
        arguments.count("--dim/--shape", size)
    arguments.one_of("--dtype", dtype, ("bf16", "fp16", "fp32"))
    arguments.count("--runs", runs)
    arguments.count("--max-trials", max_trials)
    _check_device(device)
    from agnitra.kernels.tune_matmul import tune_matmul as run
    from agnitra.kernels.tuning_cache import TuningCache

    settings = settings or load_settings()
    dev = device if isinstance(device, torch.device) else resolve_device(device or settings.device)
    report = describe_device(dev, settings)
    cache = TuningCache(settings.cache_path, report.signature["id"])
    return run(shape, parse_dtype(dtype), dev, runs=runs, cache=cache, l2_bytes=report.signature.get("l2_bytes"), force=force, kernel=kernel, max_trials=max_trials, progress=progress)


OBJECTIVES = ("latency", "throughput", "memory", "energy")


def parse_duration(text: str | float | int, flag: str = "a duration") -> float:
    """'10m', '90s', '1h', '300' -> seconds; > 0."""
    return arguments.duration(flag, text)


def default_peers(workload: Workload, device: torch.device) -> list[str]:
    """The peers measured as candidates and compared with the answer: the compile modes (on a GPU
    plain `compile` first), and ONNX Runtime where it applies (not decoders)."""
    if device.type == "cuda":
        compiles = ["compile", "compile-reduce-overhead", "compile-max-autotune"]
        return compiles[:2] if workload.decoder else compiles
    return ["compile"] if workload.decoder else ["compile", "onnxruntime-int8"]


def optimize(
    model,
    example_inputs=None,
    *,
    device=None,
    objective: str = "latency",
    tolerances: Tolerances | None = None,
    search: SearchSettings | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    settings: Settings | None = None,
    budget: str | float | None = None,
    max_error: float | None = None,
    min_cosine: float | None = None,
    min_token_agreement: float | None = None,
    min_sqnr_db: float | None = None,
    max_ppl_increase: float | str | None = None,
    min_retrieval: float | None = None,
    check_positions: int | None = None,
    transforms: Sequence[str] | None = None,
    exclude_transforms: Sequence[str] | None = None,
    strategy: str | None = None,
    candidate_timeout: str | float | None = None,
    peers: Sequence[str] | None = None,
    advisor: str | None = None,
    advisor_model: str | None = None,
    executor: str | None = None,
    evaluators: int | None = None,
    store: bool = True,
    **load_options,
):
    """Search recipes within the budget, verify each, and return the fastest correct model (the run
    recorded in the measurement store unless `store=False`, `--no-store`).

    The answer is never slower than the baseline: when no candidate beats it in the final
    interleaved run, the original model is returned and the report says so. What the answer must
    meet comes as `tolerances=Tolerances(...)`, how the search runs as `search=SearchSettings(...)`;
    their fields are also accepted one by one (`budget="3m"`, `min_cosine=0.99`), not both ways.
    `advisor="http://host/v1", advisor_model="NAME"` asks an OpenAI-compatible endpoint for recipes
    to measure first (key from AGNITRA_LLM_API_KEY; see docs/search.md). `executor="ray",
    evaluators=K` measures K candidates at once on the Ray cluster RAY_ADDRESS names (docs/service.md).
    """
    flat_tolerances = dict(max_error=max_error, min_cosine=min_cosine, min_token_agreement=min_token_agreement, min_sqnr_db=min_sqnr_db,
                           max_ppl_increase=max_ppl_increase, min_retrieval=min_retrieval, check_positions=check_positions)
    flat_search = dict(budget=budget, candidate_timeout=candidate_timeout, strategy=strategy, transforms=transforms, exclude_transforms=exclude_transforms, peers=peers,
                       advisor=advisor, advisor_model=advisor_model, executor=executor, evaluators=evaluators)
    tolerances = _grouped("tolerances", tolerances, Tolerances, flat_tolerances)
    search = _grouped("search", search, SearchSettings, flat_search)
    arguments.one_of("--objective", objective, OBJECTIVES, "objective")
    arguments.duration("--candidate-timeout", search.candidate_timeout)
    arguments.one_of("--strategy", search.strategy, _strategy_names(), "strategy")
    arguments.positive("--max-error", tolerances.max_error)
    arguments.fraction("--min-cosine", tolerances.min_cosine)
    arguments.fraction("--min-token-agreement", tolerances.min_token_agreement)
    arguments.finite("--min-sqnr", tolerances.min_sqnr_db)
    arguments.fraction("--min-retrieval", tolerances.min_retrieval)
    tolerances = dataclasses.replace(tolerances, max_ppl_increase=arguments.relative_change("--max-ppl-increase", tolerances.max_ppl_increase))
    arguments.count("--check-positions", tolerances.check_positions)
    arguments.each_one_of("--peers", search.peers, _variant_names(), "variant")
    _check_load_options(device, load_options)
    _check_executor(search)
    from agnitra.search.advisor import advisor_settings
    from agnitra.search.budget import Budget

    asked = advisor_settings(search.advisor, search.advisor_model, search.strategy)  # a URL, a model, the openai package

    clock = Budget(parse_duration(search.budget, "--budget"))  # the whole run counts, loading the model included
    if not _registers_transforms(model):
        _check_transform_names(search)  # one-line user errors, before any work
    if resume and not out:
        raise UserError("resume needs the run folder of the earlier run: give out=DIR (--out DIR)")
    from agnitra.search.run_folder import RunFolder

    _check_named_store(store)
    trained = training_mode_note(model, optimized=True)
    if trained:
        warnings.warn(trained, UserWarning, stacklevel=2)
    folder = RunFolder(out) if out else None  # writable and ours before any work is done
    try:
        return _optimize_in(folder, clock, model, example_inputs, device=device, objective=objective, tolerances=tolerances, search=search, resume=resume, progress=progress, settings=settings, load_options=load_options, store=store,
                            advisor=asked)
    finally:
        if folder is not None:
            folder.close()


def _check_executor(search: SearchSettings) -> None:
    """--executor and --evaluators, and for ray: Ray installed and its cluster answering (one line each, before any work)."""
    arguments.one_of("--executor", search.executor, ("local", "ray"), "executor")
    arguments.count("--evaluators", search.evaluators)
    if search.executor == "local" and search.evaluators not in (None, 1):
        raise UserError(f"--evaluators {search.evaluators} needs --executor ray: the local executor measures one candidate at a time in one worker process")
    if search.executor == "ray":
        from agnitra.bench.ray_slots import check

        check()


def _ray_slots(search: SearchSettings, source, reason: str) -> int:
    """The Ray evaluation slots of the run (0: the local worker); a model the slots cannot hold is refused."""
    if search.executor != "ray":
        return 0
    if source is None:
        raise UserError(f"--executor ray: the evaluation slots cannot hold this model ({reason}); run it with --executor local")
    from agnitra.config import ray_evaluators

    return search.evaluators if search.evaluators is not None else max(1, ray_evaluators())


def _grouped(name: str, group, kind, flat: dict):
    """One group of optimize's options, from the group object or from its fields given one by one."""
    given = {k: v for k, v in flat.items() if v is not None}
    if group is not None and given:
        raise UserError(f"give {name} either as {name}={kind.__name__}(...) or as {', '.join(f'{k}=' for k in given)}, not both")
    if group is not None:
        if not isinstance(group, kind):
            raise UserError(f"{name} must be a {kind.__name__}, not {type(group).__name__}")
        return group
    return kind(**given)


def _registers_transforms(model) -> bool:
    """A user's Python file may register transforms of its own when it is loaded."""
    return isinstance(model, str) and model.rpartition(":")[0].endswith(".py")


def _check_transform_names(search: SearchSettings) -> None:
    from agnitra.transforms import get_transform

    for name in list(search.transforms or []) + list(search.exclude_transforms or []):
        get_transform(name)


def _searched_transforms(search: SearchSettings) -> list[str] | None:
    """The transforms the search may use (None: all), --exclude-transforms applied."""
    if not search.exclude_transforms:
        return list(search.transforms) if search.transforms else None
    from agnitra.transforms import all_transforms

    excluded = set(search.exclude_transforms)
    return [t.name for t in all_transforms() if t.name not in excluded and (not search.transforms or t.name in search.transforms)]


def _optimize_in(folder, clock, model, example_inputs, *, device, objective, tolerances, search, resume, progress, settings, load_options, store=True, advisor=None):
    from agnitra.bench import fork_server
    from agnitra.bench.isolated import workload_source
    from agnitra.optimized import OptimizedModel
    from agnitra.search.optimize import RunSetup, run_optimize
    from agnitra.search.run_folder import journal_key

    dev = device if isinstance(device, torch.device) else resolve_device(device or load_settings().device)
    # a CPU run's workers come from a server forked from this process: started before the model is
    # built, while no OpenMP thread has run, the fork can be used (`bench.fork_server`)
    fork_server.warm(dev.type)
    workload, dev = prepare_workload(model, example_inputs, device=dev, **load_options)
    _check_transform_names(search)  # a model file may register its own
    device_report = describe_device(dev, settings)
    setup = RunSetup(folder=folder)
    if folder is not None:
        key = journal_key(model, load_options, workload, device_report, tolerances)
        if resume:
            journal = folder.resume_journal(key)
            setup.done, setup.journal_warnings = journal.results, journal.warnings
        else:
            folder.start_journal(key)
    setup.source, setup.in_process_reason = workload_source(model, load_options, workload, dev)
    setup.ray_slots = _ray_slots(search, setup.source, setup.in_process_reason)
    result = run_optimize(
        workload, dev, device_report,
        objective=objective, budget=clock, candidate_timeout_s=parse_duration(search.candidate_timeout), tolerances=tolerances,
        transforms=_searched_transforms(search), strategy=search.strategy,
        peers=list(search.peers) if search.peers is not None else default_peers(workload, dev),
        setup=setup, progress=progress, advisor=advisor,
    )
    optimized = OptimizedModel(result.model, result.recipe, workload, result.report)
    trained = training_mode_note(model, optimized=True)
    if trained:
        result.report.bench.notes.insert(0, trained)
    _record_in_store(result.report, result.report.bench.notes, store)
    if folder is not None:
        write_reports(result.report, folder.path)  # report.json, report.html, metrics.csv, candidates.csv, recipe.json
        optimized.save(folder.path)  # + what load() needs to rebuild the model
    if result.interrupted is not None:  # the best so far is saved: now the interruption goes on up
        result.interrupted.agnitra_result = optimized
        raise result.interrupted
    return optimized


# ---- arguments, checked before any work (agnitra.arguments holds the rules) ----------------------


def _check_repeats(runs: int | None, warmup: int | None) -> None:
    arguments.count("--runs", runs)
    arguments.count("--warmup", warmup, minimum=0)


def _check_device(device) -> None:
    from agnitra.device import CHOICES

    if isinstance(device, str):
        arguments.one_of("--device", device.split(":")[0].strip().lower(), CHOICES, "device")


def _check_load_options(device, load_options: dict) -> None:
    """What every verb hands to prepare_workload: known names, each value in range."""
    from inspect import signature

    from agnitra.workloads.base import TaskKind
    from agnitra.workloads.loaders import parse_input_shape
    from agnitra.workloads import prepare
    from agnitra.workloads.registry import SIZES

    known = [name for name in signature(prepare.prepare_workload).parameters if name not in ("model", "example_inputs", "device")]
    unknown = sorted(set(load_options) - set(known))
    if unknown:
        raise UserError(f"unknown option(s) {', '.join(unknown)}; the model options are: {', '.join(known)}")
    _check_device(device)
    dtype = load_options.get("dtype")
    arguments.one_of("--dtype", dtype.lower() if isinstance(dtype, str) else dtype, prepare.DTYPES, "dtype")
    for name in ("batch", "seq_len", "tokens"):
        arguments.count("--" + name.replace("_", "-"), load_options.get(name))
    arguments.one_of("--task", load_options.get("task"), [kind.value for kind in TaskKind], "task")
    arguments.one_of("--size", load_options.get("size"), SIZES, "size")
    for text in load_options.get("input_shapes") or ():
        parse_input_shape(text)


def _variant_names() -> list[str]:
    import agnitra.bench.variants  # noqa: F401  (registers the built-in variants)
    from agnitra.bench.variants.base import VARIANTS

    return list(VARIANTS)

"""`agnitra`: one entry point, subcommands over the SDK in agnitra.api.

User errors, usage errors included, end in one line on stderr and exit code 2; `--debug` shows the
traceback. Ctrl-C and SIGTERM end in one line and exit 130 and 143. While a command works, what
libraries print goes to a log file (the run folder's agnitra.log, else logs/last.log under the
cache dir; `--verbose` copies it to stderr), so `--json` leaves stdout a single JSON document.
Progress bars only on a terminal; off one, tables print as tab-separated rows.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agnitra import arguments
from agnitra.console_io import UserStreams, library_output_to, log_path
from agnitra.errors import AgnitraError, UserError

app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="Agnitra: measure, optimize and verify PyTorch models for inference. Any command also takes --verbose (library logs on stderr as well as in the log file) and --debug (tracebacks).",
)
zoo_app = typer.Typer(no_args_is_help=True, help="Built-in workloads.")
app.add_typer(zoo_app, name="zoo")
store_app = typer.Typer(no_args_is_help=True, help="The measurement store (SQLite in the cache dir, or AGNITRA_DB_URL).")
app.add_typer(store_app, name="store")
keys_app = typer.Typer(no_args_is_help=True, help="API keys of the service (stored hashed; a key is shown once).")
app.add_typer(keys_app, name="keys")
costmodel_app = typer.Typer(no_args_is_help=True, help="The learned cost model: trained on the store's measurements (or dataset CSVs), evaluated on workloads it never saw.")
app.add_typer(costmodel_app, name="costmodel")
agent_app = typer.Typer(no_args_is_help=True, help="The learning agent (--strategy ppo): trained on the store's measurements (or dataset CSVs), saved per device class.")
app.add_typer(agent_app, name="agent")

GLOBAL_FLAGS = ("--debug", "--verbose")
# click's ClickException as the installed typer raises it: typer >= 0.2x vendors click
# (typer._click), older typer uses the click package; typer.BadParameter derives from it either way
_CLICK_EXCEPTION = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


@dataclass
class _Session:
    """What one `main()` call's commands share: where our output goes, and what to say on Ctrl-C."""

    streams: UserStreams
    argv: list[str] = field(default_factory=list)
    verbose: bool = False
    interrupt_note: str = "interrupted"


def _consoles(streams: UserStreams) -> tuple[Console, Console]:
    """Results on the user's stdout, messages on their stderr; off a terminal lines are not wrapped."""
    stdout_tty, stderr_tty = streams.stdout.isatty(), streams.stderr.isatty()
    return Console(file=streams.stdout, soft_wrap=not stdout_tty), Console(file=streams.stderr, soft_wrap=True, force_terminal=None if stderr_tty else False)


_session = _Session(UserStreams(sys.stdout, sys.stderr))
out, err = _consoles(_session.streams)

DeviceOpt = typer.Option(None, "--device", help="cpu | cuda | auto (default: AGNITRA_DEVICE, else auto)")
DtypeOpt = typer.Option(None, "--dtype", help="fp32 | fp16 | bf16 (default: the workload's own for the device)")
BatchOpt = typer.Option(None, "--batch", help="batch size")
SeqOpt = typer.Option(None, "--seq-len", help="sequence length (decoders: prompt length)")
ShapeOpt = typer.Option(None, "--input-shape", help="input shape for TorchScript/ONNX, e.g. 1x128:int64 (repeat per input)")
TaskOpt = typer.Option(None, "--task", help="lm | encoder | embedding | classifier | generic (how outputs are compared)")
TokensOpt = typer.Option(None, "--tokens", help="decoders: new tokens per generation")
SizeOpt = typer.Option("full", "--size", help="zoo workloads: full, or tiny (every dimension shrunk, for smoke tests)")
JsonOpt = typer.Option(False, "--json", help="print one JSON document on stdout")
PickleOpt = typer.Option(False, "--allow-pickle", help="load pickled objects from the model file: this runs code from it; only for files you trust")
CheckInputsOpt = typer.Option(None, "--check-inputs", help="your own inputs to verify every candidate on (.pt of a tensor or tuple of tensors, or .npz; rows in batches of --batch): replaces the held-out sets derived from the example")
NoStoreOpt = typer.Option(False, "--no-store", help="do not record this run in the measurement store (AGNITRA_DB_URL, else SQLite in the cache dir)")
OutOpt = typer.Option(None, "--out", help="write report.json, metrics.csv and report.html here (and agnitra.log, what libraries printed)")


def _api():
    """agnitra.api, imported inside the work (`_working`): what torch and friends print on import goes to the log."""
    import agnitra.api

    return agnitra.api


@contextmanager
def _working(out_dir: Optional[Path], show_progress: bool):
    """The work of a command: what libraries print goes to the log, a progress bar on a terminal."""
    from agnitra.config import load_settings

    path = log_path(out_dir, load_settings().cache_path)
    echo_to = _session.streams.stderr if _session.verbose else None
    with library_output_to(path, f"agnitra {' '.join(_session.argv)} (pid {os.getpid()})", echo_to=echo_to):
        with _progress(show_progress) as progress:
            yield progress


@contextmanager
def _progress(enabled: bool):
    if not enabled or not err.is_terminal:
        yield None
        return
    # redirect_*=False: Rich would route sys.stdout/sys.stderr around the bar, past the log
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err, transient=True, redirect_stdout=False, redirect_stderr=False) as bar:
        task = bar.add_task("starting", total=1.0)
        yield lambda message, fraction: bar.update(task, description=message, completed=fraction)


def _emit(report, as_json: bool, out_dir: Optional[Path], render) -> None:
    from agnitra.api import write_reports

    if out_dir is not None:
        paths = write_reports(report, out_dir)
        err.print(f"wrote {', '.join(str(p) for p in paths.values())}")
    if as_json:
        _print_json(report.to_dict())
    else:
        render(report)


def _print_json(document) -> None:
    out.file.write(json.dumps(document, indent=2) + "\n")
    out.file.flush()


def _show(table: Table) -> None:
    """A table drawn on a terminal; elsewhere whole, as tab-separated rows."""
    from agnitra.report.console import plain_rows

    if out.is_terminal:
        out.print(table)
    else:
        out.file.write(plain_rows(table) + "\n")  # as is: Rich would expand the tabs


@zoo_app.command("list")
def zoo_list() -> None:
    """The built-in workloads with their parameter counts."""
    table = Table(title="Agnitra workload zoo", title_justify="left")
    for col, justify in (("name", "left"), ("task", "left"), ("params", "right"), ("description", "left")):
        table.add_column(col, justify=justify)
    with _working(None, show_progress=False):
        rows = [(f"zoo:{entry.name}", entry.task.value, _millions(entry.count_params("full")), entry.description) for entry in _api().zoo_entries()]
    for row in rows:
        table.add_row(*row)
    _show(table)


@zoo_app.command("build")
def zoo_build(
    name: str = typer.Argument(..., help="the zoo model to train: tinylm-py"),
    size: str = typer.Option("small", "--size", help="small (~1.7M parameters, minutes on the CPU) or large (~75M, minutes on one GPU)"),
    device: Optional[str] = DeviceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Train a zoo model on real text and cache it (the zoo uses it from then on)."""
    with _working(None, not as_json) as progress:
        path, record = _api().zoo_build(name, size=size, device=device, progress=progress)
    if as_json:
        _print_json(record)
        return
    out.print(f"{name} {size}: held-out perplexity {record['heldout_perplexity']:.3f} (a unigram model of the same bytes: "
              f"{record['unigram_perplexity']:.3f}) after {record['steps']} steps, {record['train_s']:.0f} s on {record['device']}; wrote {path}")


@app.command()
def recommend(
    model: str = typer.Argument(..., help="zoo:NAME, file.py:factory, model.pt2, ..."),
    device: Optional[str] = DeviceOpt,
    dtype: Optional[str] = DtypeOpt,
    batch: Optional[int] = BatchOpt,
    seq_len: Optional[int] = SeqOpt,
    size: str = SizeOpt,
    limit: int = typer.Option(5, "--limit", help="how many recipes"),
    allow_pickle: bool = PickleOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Recipes that worked on the nearest workloads in the store, with their measured effect."""
    with _working(None, show_progress=False):
        found = _api().recommend(model, device=device, dtype=dtype, batch=batch, seq_len=seq_len, size=size, limit=limit, **_pickle(allow_pickle))
    if as_json:
        from agnitra.results import to_dict

        _print_json([to_dict(r) for r in found])
        return
    if not found:
        out.print("no recipe in the store passed on a similar workload on this kind of device yet; run `agnitra optimize` or `agnitra store import runs/*/` first")
        return
    table = Table(title=f"Recipes that worked on workloads like {model}", title_justify="left")
    for col in ("recipe", "worked on", "distance", "speedup", "quality", "device", "predicted here"):
        table.add_column(col)
    for r in found:
        quality = f"{r.quality_metric} {r.quality_value:.4g}" if r.quality_value is not None else r.quality_metric
        predicted = f"{r.predicted['speedup']:.2f}x, P(pass) {r.predicted['p_pass']:.2f}" if r.predicted else "—"
        table.add_row(r.name, r.workload, f"{r.distance:.3f}", f"{r.speedup:.2f}x", quality, r.device, predicted)
    _show(table)


@store_app.command("import")
def store_import(paths: list[Path] = typer.Argument(..., help="run folders (their report.json), e.g. runs/*/"), as_json: bool = JsonOpt) -> None:
    """Load earlier bench and optimize run folders into the store."""
    with _working(None, show_progress=False):
        result = _api().store_import(paths)
    if as_json:
        _print_json({"imported": result.imported, "already": result.already, "skipped": result.skipped})
        return
    out.print(f"imported {len(result.imported)} run(s); {len(result.already)} stored already; {len(result.skipped)} skipped")
    for line in result.skipped:
        err.print(f"skipped: {line}")


@store_app.command("export")
def store_export(
    csv_path: Path = typer.Option(..., "--csv", help="the CSV file to write: one row per measurement"),
    features: bool = typer.Option(False, "--features", help="the cost model's dataset: each recipe's measurement with its workload's signature and device features"),
    device_kind: Optional[str] = typer.Option(None, "--device-kind", help="with --features: only measurements on this kind of device (cpu, cuda)"),
) -> None:
    """Write every measurement in the store, with its workload, device and run, as one CSV."""
    if device_kind is not None and not features:
        raise UserError("--device-kind applies to the dataset only; add --features")
    with _working(None, show_progress=False):
        rows, url, skipped = _api().store_dataset(csv_path, device_kind) if features else _api().store_export(csv_path)
    out.print(f"wrote {rows} {'recipe measurement' if features else 'measurement'}(s) to {csv_path}" + (f"; {len(skipped)} damaged row(s) left out" if skipped else ""))
    for line in skipped[:5]:
        err.print(f"damaged: {line}")


DatasetOpt = typer.Option(None, "--dataset", help="dataset CSV(s) from `agnitra store export --features` (repeat); default: the store")
DeviceKindOpt = typer.Option(None, "--device-kind", help="only measurements on this kind of device: cpu or cuda")


@costmodel_app.command("train")
def costmodel_train(
    dataset: Optional[list[Path]] = DatasetOpt,
    device_kind: Optional[str] = DeviceKindOpt,
    out_path: Optional[Path] = typer.Option(None, "--out", help="where to save it (default: costmodel.json in the cache dir)"),
    as_json: bool = JsonOpt,
) -> None:
    """Train the cost model (speedup with its uncertainty, P(pass), memory, quality error) and save it."""
    with _working(None, show_progress=False):
        model, path = _api().costmodel_train(dataset, device_kind=device_kind, out=out_path)
    if as_json:
        _print_json({"path": str(path), "info": model.info, "notes": model.notes})
        return
    info = model.info
    out.print(f"cost model trained on {info['rows']} recipe measurement(s) of {info['groups']} run(s) ({', '.join(info['device_kinds'])}): {info['speed_rows']} timed, {info['pass_rows']} verified; saved to {path}")
    for note in model.notes:
        err.print(f"note: {note}")


@costmodel_app.command("eval")
def costmodel_eval(
    dataset: Optional[list[Path]] = DatasetOpt,
    device_kind: Optional[str] = DeviceKindOpt,
    by: str = typer.Option("workload", "--by", help="what is held out: workload (one workload at one size) or family (all sizes of a family)"),
    out_path: Optional[Path] = typer.Option(None, "--out", help="also write the evaluation as JSON here"),
    as_json: bool = JsonOpt,
) -> None:
    """Leave-one-out evaluation: MAPE of the predicted speedup and Kendall's tau per device kind."""
    with _working(None, not as_json) as progress:
        evaluation = _api().costmodel_eval(dataset, device_kind=device_kind, by=by, out=out_path, progress=progress)
    if as_json:
        _print_json(evaluation.to_dict())
        return
    table = Table(title=f"Cost model, leave one {by} out ({evaluation.rows} rows)", title_justify="left")
    for col in ("device", "held out", "rows", "MAPE", "Kendall tau", "pass accuracy", "failures caught", "top-1 regret"):
        table.add_column(col)
    fmt = lambda v, pct=False: "—" if v is None else (f"{v:.1%}" if pct else f"{v:.3f}")  # noqa: E731
    for d in evaluation.devices:
        table.add_row(d.device_kind, str(d.groups), str(d.rows), fmt(d.mape, True), fmt(d.kendall_tau), fmt(d.pass_accuracy, True), fmt(d.failures_caught, True), fmt(d.top1_regret, True))
    _show(table)


DeviceClassOpt = typer.Option(None, "--device-class", help="cpu, cuda (any GPU) or cuda-smNN (cuda-sm90: H100/H200); default: this machine's")


@agent_app.command("train")
def agent_train(
    steps: int = typer.Option(20000, "--steps", help="PPO steps on the cost model after behaviour cloning (0: cloning only)"),
    from_store: bool = typer.Option(False, "--from-store", help="train on the store's measurements (the default)"),
    dataset: Optional[list[Path]] = typer.Option(None, "--dataset", help="dataset CSV(s) from `agnitra store export --features` (repeat) instead of the store"),
    device_class: Optional[str] = DeviceClassOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Behaviour cloning of each run's best measured recipe, then PPO on the cost model; saved as the next policy version."""
    if from_store and dataset:
        raise UserError("--from-store and --dataset: give one (the store is the default)")
    with _working(None, show_progress=False):
        trained, path = _api().agent_train(dataset, steps=steps, device_class=device_class)
    record = trained.policy.record
    if as_json:
        _print_json({"path": str(path), **{k: v for k, v in record.items() if k not in ("layout", "state")}})
        return
    out.print(f"policy {record['version']} for {record['device_class']}: cloned the best recipe of {trained.imitated} run(s) ({trained.rows} rows, {trained.workloads} workloads), "
              f"then {trained.ppo_steps} PPO steps; mean predicted reward {trained.reward_after_bc:.3f} after cloning, {trained.reward_after_ppo:.3f} after PPO; saved to {path}")
    if trained.nothing_to_imitate:
        err.print(f"note: {trained.nothing_to_imitate} run(s) had no recipe that passed and beat the original: nothing to imitate there")


@agent_app.command("eval")
def agent_eval(
    workloads: Optional[list[str]] = typer.Option(None, "--workloads", help="only these workloads (comma-separated or repeated)"),
    dataset: Optional[list[Path]] = typer.Option(None, "--dataset", help="dataset CSV(s) instead of the store"),
    device_class: Optional[str] = DeviceClassOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The newest policy's greedy recipe on each measured workload, against plain torch.compile and the best measured recipe."""
    with _working(None, show_progress=False):
        found = _api().agent_eval(dataset, workloads=workloads, device_class=device_class)
    if as_json:
        _print_json(found.to_dict())
        return
    wins, compared = found.beats_compile
    table = Table(title=f"Agent policy {found.policy} on {found.device_class}: at least plain compile on {wins} of {compared}", title_justify="left")
    for col in ("workload", "agent's recipe", "speedup", "compile", "best measured", "best"):
        table.add_column(col)
    fmt = lambda v: "—" if v is None else f"{v:.2f}x"  # noqa: E731
    for w in found.workloads:
        table.add_row(w.workload, escape(w.agent), fmt(w.agent_speedup) + ("" if w.agent_passed else " (failed)"), fmt(w.compile_speedup), escape(w.best), fmt(w.best_speedup))
    _show(table)
    if found.unreachable:
        err.print(f"note: {found.unreachable} run(s) measured no recipe the policy can build")


@app.command()
def collect(
    specs: Optional[list[str]] = typer.Argument(None, help="model specs to collect on (zoo:NAME, gen:mlp-w512-d4, file.py:factory, ...)"),
    plan: bool = typer.Option(False, "--plan", help="the designed plan for this device: zoo workloads and --generated models of the generated family"),
    generated: int = typer.Option(12, "--generated", help="with --plan: how many generated models"),
    plan_part: str = typer.Option("1/1", "--plan-part", help="with --plan: K/N, the K-th of N interleaved parts (a plan collected over N sessions)"),
    families: Optional[str] = typer.Option(None, "--families", help="with --plan: comma-separated generated families (mlp, conv, tfm, lm; default mlp,conv,tfm)"),
    no_zoo: bool = typer.Option(False, "--no-zoo", help="with --plan: the generated models alone, not the zoo workloads"),
    device: Optional[str] = DeviceOpt,
    batch: Optional[list[int]] = typer.Option(None, "--batch", help="for the named specs: collect at each of these batch sizes"),
    tokens: Optional[int] = TokensOpt,
    sample: int = typer.Option(16, "--sample", help="recipes measured per workload: every single-step recipe, then multi-step ones at random"),
    budget: str = typer.Option("3m", "--budget-per-workload", help="time per workload, e.g. 90s, 3m"),
    candidate_timeout: str = typer.Option("90s", "--candidate-timeout", help="one recipe's run, past which it is stopped"),
    seed: int = typer.Option(0, "--seed", help="the designed sample's and the generated names' seed"),
    transforms: Optional[str] = typer.Option(None, "--transforms", help="comma-separated: sample recipes of these transforms only"),
    recipes: Optional[str] = typer.Option(None, "--recipes", help="';'-separated recipes measured on every workload, in this order, instead of a sample ('compile + cuda-graphs; fuse-projections')"),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="write the dataset (the store's recipe measurements with features) here after collecting"),
    as_json: bool = JsonOpt,
) -> None:
    """Measure a designed sample of recipes over many workloads into the store: the cost model's data."""
    arguments.count("--generated", generated, minimum=0)
    for b in batch or []:
        arguments.count("--batch", b)
    if tokens is not None:
        arguments.count("--tokens", tokens)
    with _working(None, not as_json) as progress:
        entries = _api().collect_plan(device=device, generated=generated, seed=seed, part=plan_part, families=_names(families), zoo=not no_zoo) if plan else []
        entries += _api().collect_entries(specs or [], batch or [], tokens)
        collected = _api().collect(entries, device=device, sample=sample, budget_per_workload=budget, candidate_timeout=candidate_timeout, seed=seed,
                                  transforms=_names(transforms), dataset=dataset, progress=progress, recipes=_recipe_texts(recipes))
    if as_json:
        _print_json([{"workload": c.entry.label(), "error": c.error, "search": c.report.search if c.report else None, "verdict": c.report.verdict if c.report else ""} for c in collected])
        return
    table = Table(title="Collected", title_justify="left")
    for col in ("workload", "space", "measured", "passed", "note"):
        table.add_column(col)
    for c in collected:
        if c.report is None:
            table.add_row(c.entry.label(), "", "", "", c.error)
            continue
        info = c.report.search
        table.add_row(c.entry.label(), str(info["space_size"]), str(info["evaluated"]), str(sum(r.passed for r in c.report.candidates)), "; ".join(c.notes))
    _show(table)
    if dataset is not None:
        out.print(f"dataset written to {dataset}")


def _recipe_texts(text: str | None) -> list[str]:
    """--recipes: recipes separated by ';'."""
    if text is None:
        return []
    parts = [p.strip() for p in text.split(";")]
    if not any(parts):
        raise UserError("--recipes names no recipe; separate recipes with ';', e.g. --recipes 'compile + cuda-graphs; fuse-projections'")
    return [p for p in parts if p]


@store_app.command("info")
def store_info(as_json: bool = JsonOpt) -> None:
    """Where the store is, its schema revision and how many rows each table holds."""
    with _working(None, show_progress=False):
        info = _api().store_info()
    if as_json:
        _print_json(info)
        return
    out.print(" ".join(f"{k}={v}" for k, v in info.items()))


def _millions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _names(text: Optional[str]) -> Optional[list[str]]:
    """A comma-separated flag as names; None when not given, [] when given empty (--peers "")."""
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def _check_inputs(path: Path | None) -> dict:
    """--check-inputs as a load option, passed only when given (a path: a worker reads it again)."""
    return {"check_inputs": str(path)} if path is not None else {}


def _pickle(allow_pickle: bool) -> dict:
    """--allow-pickle as a load option, passed only when given (the default is the loader's own: no)."""
    return {"allow_pickle": True} if allow_pickle else {}


@app.command()
def profile(
    model: str = typer.Argument(..., help="zoo:NAME, file.py:factory, *.pt2, *.onnx or TorchScript"),
    device: Optional[str] = DeviceOpt,
    dtype: Optional[str] = DtypeOpt,
    batch: Optional[int] = BatchOpt,
    seq_len: Optional[int] = SeqOpt,
    input_shape: Optional[list[str]] = ShapeOpt,
    task: Optional[str] = TaskOpt,
    size: str = SizeOpt,
    runs: int = typer.Option(50, "--runs", help="timed calls"),
    warmup: int = typer.Option(5, "--warmup", help="warm-up calls"),
    allow_pickle: bool = PickleOpt,
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = OutOpt,
) -> None:
    """Operator table (time, FLOPs, bytes), latency, peak memory and NVML telemetry."""
    from agnitra.report.console import ops_table

    with _working(out_dir, not as_json) as progress:
        if progress:
            progress("loading and profiling", 0.1)
        report = _api().profile(model, device=device, dtype=dtype, batch=batch, seq_len=seq_len, input_shapes=input_shape, task=task, size=size, runs=runs, warmup=warmup, **_pickle(allow_pickle))

    def render(r) -> None:
        _print_device(r.device)
        lat = r.latency_ms
        out.print(f"[bold]{r.workload['name']}[/] ({r.conditions['unit']}, shapes {r.conditions['shapes']}): median {lat.median:.3f} ms, p95 {lat.p95:.3f} ms over {lat.samples} runs")
        out.print(f"FLOPs {r.total_flops / 1e9:.3f} G, bytes moved {r.total_bytes / 1e6:.1f} MB, peak memory {(r.peak_memory_bytes or 0) / 2**20:.1f} MiB ({r.conditions['peak_memory']})")
        if r.nvml:
            out.print(f"GPU: utilisation {r.nvml['utilization_mean']:.0f}%, power {r.nvml['power_mean_w']:.0f} W, energy {r.nvml['energy_j']:.2f} J ({r.nvml['energy_source']})")
        else:
            out.print(f"NVML: {r.nvml_reason}")
        _show(ops_table(r.ops, limit=20))

    _emit(report, as_json, out_dir, render)


@app.command()
def bench(
    model: str = typer.Argument(..., help="zoo:NAME, file.py:factory, *.pt2, *.onnx or TorchScript"),
    variants: str = typer.Option("eager", "--variants", help="comma-separated: eager, compile, compile-max-autotune, compile-reduce-overhead, onnxruntime, onnxruntime-int8"),
    device: Optional[str] = DeviceOpt,
    dtype: Optional[str] = DtypeOpt,
    batch: Optional[int] = BatchOpt,
    seq_len: Optional[int] = SeqOpt,
    tokens: Optional[int] = TokensOpt,
    input_shape: Optional[list[str]] = ShapeOpt,
    task: Optional[str] = TaskOpt,
    size: str = SizeOpt,
    runs: Optional[int] = typer.Option(None, "--runs", help="timed runs (default 50 calls; decoders 5 generations)"),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="warm-up runs (default 5; decoders 2 generations)"),
    temperature: float = typer.Option(0.0, "--temperature", help="decoders: sampling temperature (0 = greedy)"),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="decoders: sample from the k most likely tokens"),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="correctness threshold for the workload's metric"),
    check_positions: Optional[int] = typer.Option(None, "--check-positions", help="decoders: teacher-forced positions verified (default: --tokens; 1024 on held-out text), in windows of --tokens"),
    no_check: bool = typer.Option(False, "--no-check", help="skip the correctness comparison"),
    no_ops: bool = typer.Option(False, "--no-ops", help="skip the operator breakdown"),
    recipe: Optional[list[str]] = typer.Option(None, "--recipe", help="also measure a recipe against the variants: a recipe.json, or inline as 'int8-weight-only + compile(mode=reduce-overhead)' (repeatable)"),
    allow_pickle: bool = PickleOpt,
    check_inputs: Optional[Path] = CheckInputsOpt,
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = OutOpt,
    no_store: bool = NoStoreOpt,
) -> None:
    """Measure variants of one workload side by side, interleaved, with correctness and roofline."""
    with _working(out_dir, not as_json) as progress:
        report = _api().benchmark(
            model, variants=variants.split(",") + _recipe_variants(recipe or []), device=device, dtype=dtype, batch=batch, seq_len=seq_len, tokens=tokens,
            input_shapes=input_shape, task=task, size=size, runs=runs, warmup=warmup, temperature=temperature, top_k=top_k,
            threshold=threshold, check_positions=check_positions, check=not no_check, op_breakdown=not no_ops, progress=progress, store=not no_store, **_pickle(allow_pickle), **_check_inputs(check_inputs),
        )
    _emit(report, as_json, out_dir, _render_bench)


def _recipe_variants(texts: list[str]) -> list:
    """--recipe: each a recipe.json or an inline recipe, measured as one more variant."""
    return [_api().recipe_variant(text) for text in texts]


def _render_bench(report) -> None:
    from agnitra.report.console import bench_table, checks_summary, decode_summary, ops_table, weights_summary

    _print_device(report.device)
    out.print(f"conditions: {json.dumps({k: v for k, v in report.conditions.items() if k not in ('shapes', 'verification')})}")
    _show(bench_table(report))
    for summary in (checks_summary(report), decode_summary(report), weights_summary(report)):
        if summary:
            out.print(summary)
    if report.roofline:
        r = report.roofline
        out.print(f"roofline ({r.notes}): {r.flops / 1e9:.3f} GFLOP, {r.bytes / 1e6:.1f} MB compulsory -> floor {r.floor_ms:.4f} ms ({r.bound}-bound, {r.dtype})")
    if report.op_breakdown:
        unit = "decode step" if report.conditions.get("mode") == "decode" else "forward call"
        _show(ops_table(report.op_breakdown, limit=15, title=f"Operator breakdown of one {unit} (eager)"))
    for note in report.notes:
        out.print(f"[dim]note: {note}[/]")


def _print_device(device) -> None:
    c = device.ceilings
    tflops = ", ".join(f"{k} {v:.1f}" for k, v in c.get("matmul_tflops", {}).items() if v)
    cached = "cached" if c.get("cached") else "measured now"
    out.print(f"device: [bold]{device.name}[/] ({device.kind}, signature {device.signature.get('id')}); ceilings ({cached}): copy {c.get('copy_gbps')} GB/s, matmul TFLOP/s {tflops}")
    if c.get("note"):
        out.print(f"note: {c['note']}", style="dim", markup=False, highlight=False)


@app.command()
def optimize(
    model: str = typer.Argument(None, help="zoo:NAME, file.py:factory, *.pt2, *.onnx or TorchScript"),
    device: Optional[str] = DeviceOpt,
    dtype: Optional[str] = DtypeOpt,
    batch: Optional[int] = BatchOpt,
    seq_len: Optional[int] = SeqOpt,
    tokens: Optional[int] = TokensOpt,
    input_shape: Optional[list[str]] = ShapeOpt,
    task: Optional[str] = TaskOpt,
    size: str = SizeOpt,
    objective: str = typer.Option("latency", "--objective", help="latency | throughput | memory | energy"),
    budget: str = typer.Option("10m", "--budget", help="time for the whole run, e.g. 3m, 600s"),
    max_error: Optional[float] = typer.Option(None, "--max-error", help="relative L2 error allowed (encoders, generic models)"),
    min_cosine: Optional[float] = typer.Option(None, "--min-cosine", help="mean cosine similarity required (embeddings)"),
    min_token_agreement: Optional[float] = typer.Option(None, "--min-token-agreement", help="decoders: next-token agreement required (teacher-forced)"),
    min_sqnr: Optional[float] = typer.Option(None, "--min-sqnr", help="decoders: logit SQNR in dB required against the original (default 20)"),
    max_ppl_increase: Optional[str] = typer.Option(None, "--max-ppl-increase", help="decoders with held-out text (tinylm-py): held-out perplexity rise allowed, e.g. 1% (the default) or 0.5%"),
    min_retrieval: Optional[float] = typer.Option(None, "--min-retrieval", help="embeddings on real sentences (minilm): share of sentences that must keep their nearest neighbour (reported always)"),
    check_positions: Optional[int] = typer.Option(None, "--check-positions", help="decoders: teacher-forced positions verified (default: --tokens; 1024 on held-out text), in windows of --tokens"),
    transforms: Optional[str] = typer.Option(None, "--transforms", help="comma-separated: search only these transforms"),
    exclude_transforms: Optional[str] = typer.Option(None, "--exclude-transforms", help="comma-separated: search all but these"),
    list_transforms: bool = typer.Option(False, "--list-transforms", help="list the transforms and what each needs"),
    candidate_timeout: str = typer.Option("5m", "--candidate-timeout", help="a candidate running longer is recorded as timed out"),
    strategy: str = typer.Option("auto", "--strategy", help="how the space is searched: auto (the default: the cost model where one trains, else lossless recipes first; near-identical variants wait once one failed verification), model (the cost model learned from the store: the largest expected gain first), enumerate (by the transforms' priors), random, tpe (Optuna TPE), nsga2 (Optuna NSGA-II over speed, memory and error), llm (the advisor's recipes first, then auto; needs --advisor), ppo (the learning agent's recipes first, then model; needs the agent extra)"),
    advisor: Optional[str] = typer.Option(None, "--advisor", help="URL of an OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1) asked for recipes, measured first; key from AGNITRA_LLM_API_KEY; off by default"),
    advisor_model: Optional[str] = typer.Option(None, "--advisor-model", help="the model the --advisor endpoint serves"),
    peers: Optional[str] = typer.Option(None, "--peers", help="comma-separated peer variants, measured as candidates and compared in the final run (default: the compile modes, and ONNX Runtime where it applies)"),
    executor: str = typer.Option("local", "--executor", help="where candidates are measured: local (one worker process here, one at a time) or ray (--evaluators slots at once on the Ray cluster RAY_ADDRESS names; pip install 'agnitra[ray]')"),
    evaluators: Optional[int] = typer.Option(None, "--evaluators", help="with --executor ray: candidates measured at once, each on a Ray slot of its own (default AGNITRA_RAY_EVALUATORS, else 2)"),
    resume: bool = typer.Option(False, "--resume", help="reuse the candidates already measured in --out"),
    allow_pickle: bool = PickleOpt,
    check_inputs: Optional[Path] = CheckInputsOpt,
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = typer.Option(Path("runs/optimize"), "--out", help="run directory: report, recipe, journal"),
    no_store: bool = NoStoreOpt,
) -> None:
    """Search recipes, verify each against the original, return the fastest correct model."""
    if list_transforms:
        _list_transforms()
        return
    if model is None:
        raise UserError("give a model to optimize, e.g. `agnitra optimize zoo:tinylm`, or --list-transforms")
    if resume and not (out_dir / "candidates.jsonl").is_file():
        raise UserError(f"--resume: {out_dir} holds no earlier run (candidates.jsonl); drop --resume or point --out at it")
    _session.interrupt_note = f"interrupted; the best verified recipe so far and the partial results are in {out_dir}; resume with --resume" if out_dir is not None else "interrupted"
    with _working(out_dir, not as_json) as progress:
        optimized = _api().optimize(
            model, device=device, dtype=dtype, batch=batch, seq_len=seq_len, tokens=tokens, input_shapes=input_shape, task=task, size=size,
            objective=objective, budget=budget, max_error=max_error, min_cosine=min_cosine, min_token_agreement=min_token_agreement, min_sqnr_db=min_sqnr, max_ppl_increase=max_ppl_increase, min_retrieval=min_retrieval, check_positions=check_positions,
            transforms=_names(transforms) or None, exclude_transforms=_names(exclude_transforms) or None,
            candidate_timeout=candidate_timeout, strategy=strategy, advisor=advisor, advisor_model=advisor_model,
            peers=_names(peers), executor=executor, evaluators=evaluators, out=out_dir, resume=resume, progress=progress, store=not no_store, **_pickle(allow_pickle), **_check_inputs(check_inputs),
        )
    if out_dir is not None:
        err.print(f"wrote {out_dir}/: report.json, report.html, metrics.csv, candidates.csv, recipe.json, agnitra.json")
    _emit(optimized.report, as_json, None, _render_optimize)


def _list_transforms() -> None:
    table = Table(title="Transforms", title_justify="left")
    for col in ("name", "stage", "parameters", "what it does", "needs"):
        table.add_column(col, overflow="fold")
    import dataclasses

    for t in _api().transforms():
        params = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(t.Params))
        table.add_row(t.name, t.stage, params or "—", t.description, t.requires or "—")
    _show(table)


def _render_optimize(report) -> None:
    from agnitra.report.console import advisor_lines, bench_table, candidates_table, checks_summary

    _print_device(report.bench.device)
    _show(candidates_table(report))
    _show(bench_table(report.bench, title="Final interleaved run: baseline, peers, finalists"))
    checks = checks_summary(report.bench)
    if checks:
        out.print(f"[dim]{checks}[/]", highlight=False)
    for item in report.search["not_applicable"]:
        out.print(f"[dim]not applicable: {item['transform']}: {item['reason']}[/]")
    for note in report.search.get("notes", []) + report.bench.notes:
        out.print(f"[dim]note: {note}[/]", highlight=False)
    for line in advisor_lines(report):
        out.print(line, style="dim", markup=False, highlight=False)
    out.print(f"[bold]{report.verdict}[/]", highlight=False)


@app.command()
def inspect(
    model: str = typer.Argument(..., help="zoo:NAME, file.py:factory, *.pt2, *.onnx or TorchScript"),
    device: Optional[str] = DeviceOpt,
    dtype: Optional[str] = DtypeOpt,
    batch: Optional[int] = BatchOpt,
    seq_len: Optional[int] = SeqOpt,
    input_shape: Optional[list[str]] = ShapeOpt,
    task: Optional[str] = TaskOpt,
    size: str = SizeOpt,
    runs: int = typer.Option(10, "--runs", help="profiled calls for the time attribution"),
    no_time: bool = typer.Option(False, "--no-time", help="costs only, no measured time"),
    limit: int = typer.Option(15, "--limit", help="hotspot rows to show"),
    allow_pickle: bool = PickleOpt,
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = OutOpt,
) -> None:
    """The captured graph: hotspots by module (time, FLOPs, bytes, intensity, bound), graph breaks, op mix."""
    arguments.count("--limit", limit)
    with _working(out_dir, not as_json) as progress:
        if progress:
            progress("capturing, annotating and timing", 0.2)
        report = _api().inspect(model, device=device, dtype=dtype, batch=batch, seq_len=seq_len, input_shapes=input_shape, task=task, size=size, runs=runs, timed=not no_time, **_pickle(allow_pickle))
    _emit(report, as_json, out_dir, lambda r: _render_inspect(r, limit))


def _render_inspect(report, limit: int) -> None:
    from agnitra.report.inspect_console import graph_breaks_table, hotspot_table, op_mix_table

    ir = report.ir
    _print_device(report.device)
    out.print(f"[bold]{report.workload['name']}[/] ({report.workload['unit']}): IR from {ir.source}, {len(ir.nodes)} nodes, {ir.params:,} parameters, {ir.total_flops / 1e9:.3f} GFLOP, {ir.total_bytes / 1e6:.1f} MB moved")
    t = report.timing
    if t:
        busy = f", GPU busy {t['device_busy_ms']:.3f} ms" if t.get("device_busy_ms") is not None else ""
        out.print(f"measured {t['measured_ms']:.3f} ms per call{busy}; ranked by {t['resource']} time; {t['attributed_share']:.1%} of it attributed to named modules")
    _show(hotspot_table(report.hotspots, limit=limit))
    _show(op_mix_table(ir))
    breaks = graph_breaks_table(ir)
    if breaks is not None:
        _show(breaks)
    else:
        out.print("graph breaks: none")
    for note in ir.notes:
        out.print(f"[dim]note: {note}[/]")


@app.command("tune-matmul")
def tune_matmul_cmd(
    dim: Optional[int] = typer.Option(None, "--dim", help="square problem: M = N = K = dim"),
    shape: Optional[str] = typer.Option(None, "--shape", help="M,N,K (instead of --dim)"),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32"),
    runs: int = typer.Option(20, "--runs", help="timed runs per configuration"),
    kernel: str = typer.Option("matmul", "--kernel", help="matmul | matmul_bias_gelu"),
    max_trials: int = typer.Option(40, "--max-trials", help="configurations tried; every one when this covers the space, else Optuna TPE"),
    device: Optional[str] = DeviceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Autotune Agnitra's matmul template for one shape and compare it with torch.matmul (cuBLAS)."""
    from agnitra.results import to_dict

    if (dim is None) == (shape is None):
        raise UserError("give either --dim N or --shape M,N,K")
    problem = (dim, dim, dim) if dim is not None else _parse_shape(shape)

    def show(trial) -> None:
        if not as_json:
            status = f"{trial.ms:.4f} ms" if trial.ok else f"failed: {trial.reason[:80]}"
            out.print(f"  {trial.config}  {status}", highlight=False)

    with _working(None, show_progress=False):
        tuning = _api().tune_matmul(problem, dtype=dtype, runs=runs, device=device, kernel=kernel, max_trials=max_trials, progress=show)
    r = tuning.result
    if as_json:
        _print_json({"shape": list(problem), "dtype": r.dtype, "best": r.best, "best_ms": r.best_ms, "best_tflops": tuning.tflops(r.best_ms), "default": r.default, "default_ms": r.default_ms, "head_to_head_ms": tuning.best_ms, "torch_matmul_ms": tuning.torch_ms, "torch_tflops": tuning.tflops(tuning.torch_ms), "vs_torch": tuning.vs_torch, "strategy": r.strategy, "trials": to_dict(r.trials)})
        return
    for config, ms in r.head_to_head:
        out.print(f"  finalist, head to head: {config}  {ms:.4f} ms", highlight=False)
    out.print(f"[bold]winner[/] {r.best}: {r.best_ms:.4f} ms = {tuning.tflops(r.best_ms):.1f} TFLOP/s ({r.strategy}, {len(r.trials)} configurations tried)")
    out.print(f"default {r.default}: {r.default_ms:.4f} ms" if r.default_ms else f"default {r.default}: failed")
    out.print(f"head to head (5 interleaved rounds): winner {tuning.best_ms:.4f} ms = {tuning.tflops(tuning.best_ms):.1f} TFLOP/s,"
              f" torch.matmul {tuning.torch_ms:.4f} ms = {tuning.tflops(tuning.torch_ms):.1f} TFLOP/s -> Agnitra's kernel is {tuning.vs_torch:.2f}x torch.matmul's speed")


def _parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.replace("x", ",").split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise UserError(f"bad --shape '{text}'; write M,N,K, e.g. 1,4096,4096")
    return tuple(int(p) for p in parts)


@app.command("device")
def device_cmd(
    device: Optional[str] = DeviceOpt,
    refresh: bool = typer.Option(False, "--refresh", help="measure the ceilings again"),
    as_json: bool = JsonOpt,
) -> None:
    """The device signature and its measured ceilings."""
    with _working(None, show_progress=False):
        from agnitra.results import to_dict

        report = _api().describe_device(device, refresh=refresh)
    if as_json:
        _print_json(to_dict(report))
        return
    _print_device(report)
    for key, value in report.signature.items():
        out.print(f"  {key}: {value}")


@app.command()
def version() -> None:
    """Versions of Agnitra and what it runs on."""
    with _working(None, show_progress=False):
        versions = _api().versions()
    for name, value in versions.items():
        out.print(f"{name} {value or '-'}")


class Interrupted(BaseException):
    """SIGINT or SIGTERM in the main process. Not a KeyboardInterrupt, so that neither typer (which
    turns one into an exit code, or click's Abort) nor a library's `except` swallows it on the way."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum  # 130 for SIGINT, 143 for SIGTERM


@contextmanager
def _signals_interrupt():
    """SIGINT and SIGTERM raise Interrupted in this process while the block runs. A child forked
    meanwhile inherits the handler: there it does what the signal's default would."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    main_pid = os.getpid()

    def handler(signum, frame) -> None:
        if os.getpid() != main_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Interrupted(signum)

    earlier_hook = sys.unraisablehook

    def redeliver_swallowed(unraisable) -> None:
        """Raised where Python can only print it (a __del__, a weakref callback): sent again from
        a thread a moment later, so that it lands in ordinary code and the command still stops."""
        if isinstance(unraisable.exc_value, Interrupted) and os.getpid() == main_pid:
            again = threading.Timer(0.05, os.kill, (main_pid, unraisable.exc_value.signum))
            again.daemon = True
            again.start()
            return
        earlier_hook(unraisable)

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = redeliver_swallowed
    try:
        yield
    finally:
        sys.unraisablehook = earlier_hook
        for signum, before in previous.items():
            signal.signal(signum, before if before is not None else signal.SIG_DFL)


def _usage_error(exc) -> int:
    """click's usage errors in one line: the problem, the command, where its help is."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # `agnitra` or `agnitra zoo` alone: their help
        return app(args=[*exc.ctx.command_path.split()[1:], "--help"], prog_name="agnitra", standalone_mode=False) or 0
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "agnitra"
    message = " ".join(exc.format_message().split()).rstrip(".")
    message = message[:1].lower() + message[1:]
    err.print(f"[red]error:[/] {escape(message)} (`{command}`); see `{command} --help`", highlight=False)
    return exc.exit_code


def _interrupted(exit_code: int) -> int:
    err.print(_session.interrupt_note, highlight=False)
    return exit_code


def interruption_in(exc: BaseException) -> int | None:
    """The exit code of an interruption an exception was raised from (Python wraps one that hits a
    class body's __set_name__ during an import in a RuntimeError), or None."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, Interrupted):
            return link.exit_code
        if isinstance(link, KeyboardInterrupt):
            return 130
        link = link.__cause__ or link.__context__
    return None


def _run(argv: list[str], debug: bool) -> int:
    """The command's exit code; every error becomes one line on stderr unless `debug`."""
    try:
        code = app(args=argv, prog_name="agnitra", standalone_mode=False)
    except Interrupted as exc:
        return _interrupted(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):  # a KeyboardInterrupt not from our handler (older click: Abort)
        return _interrupted(130)
    except UserError as exc:
        if debug:
            raise
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except AgnitraError as exc:
        if debug:
            raise
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return 1
    except Exception as exc:  # noqa: BLE001 - anything else is a defect; say so in one line
        if isinstance(exc, _CLICK_EXCEPTION):
            return _usage_error(exc)
        interrupted = interruption_in(exc)
        if interrupted is not None:  # e.g. Ctrl-C inside a lazy import, re-raised as a RuntimeError
            return _interrupted(interrupted)
        if debug:
            raise
        from agnitra.errors import first_line

        err.print(f"[red]internal error:[/] {escape(first_line(exc))} (rerun with --debug for the traceback, and please report it)", highlight=False)
        return 1
    if code == 130:  # typer >= 0.2x returns a KeyboardInterrupt as exit code 130
        return _interrupted(130)
    return code if isinstance(code, int) else 0


@app.command()
def check(
    model: str = typer.Argument(..., help="the model the baseline report was made for (zoo:NAME, file.py:factory, a model file)"),
    baseline: Path = typer.Option(..., "--baseline", help="report.json of an earlier optimize (its chosen recipe) or bench run"),
    variant: Optional[str] = typer.Option(None, "--variant", help="a bench report's row to judge (optimize reports: the chosen one)"),
    device: Optional[str] = DeviceOpt,
    dtype: Optional[str] = DtypeOpt,
    batch: Optional[int] = BatchOpt,
    seq_len: Optional[int] = SeqOpt,
    tokens: Optional[int] = TokensOpt,
    size: str = SizeOpt,
    runs: Optional[int] = typer.Option(None, "--runs", help="timed runs (default 50 calls)"),
    max_latency_regression: str = typer.Option("10%", "--max-latency-regression", help="slower than the baseline by more than this fails"),
    max_quality_drop: float = typer.Option(0.01, "--max-quality-drop", help="quality lost beyond this on the error scale fails (cosine or top-1 points, relative error)"),
    as_json: bool = JsonOpt,
) -> int:
    """Release gate for CI: measure again with the baseline's recipe; exit 1 on a regression, with one line."""
    regression = arguments.relative_change("--max-latency-regression", max_latency_regression)
    with _working(None, not as_json) as progress:
        result = _api().check(model, baseline=baseline, variant=variant, device=device, dtype=dtype, batch=batch, seq_len=seq_len, tokens=tokens, size=size,
                              runs=runs, max_latency_regression=regression, max_quality_drop=max_quality_drop, progress=progress)
    if as_json:
        _print_json(result.to_dict())
    if not result.passed:
        err.print(f"check failed: {result.reason}", highlight=False)
        return 1  # the command's value is the exit code (standalone_mode=False)
    if not as_json:
        out.print(f"check passed: {result.reason}", highlight=False)
    return 0


@app.command()
def layout(
    model: str = typer.Argument(..., help="zoo:NAME, file.py:factory or a model file"),
    transform: str = typer.Option("sparsity:2:4,quant:int4", "--transform", help="state transforms in order: sparsity:2:4, quant:int4[:gN], quant:int8, quant:int3|int2[:gN] (no kernel: quality only), blocks:SIZE:DENSITY, and for our Llama decoders the KV cache: kv:int8[:gN], kv:int4[:gN], kv:prune:F"),
    modes: str = typer.Option("none,once,iterative,gathered", "--modes", help="none (transforms only), once (permuted before the first), iterative (re-permuted before each), gathered (iterative, and each layer reading the residual stream in an order of its own, gathered at run time)"),
    solve_seconds: float = typer.Option(60.0, "--solve-seconds", help="the solver's time for each step's permutations"),
    calibration_batches: int = typer.Option(8, "--calibration-batches", help="batches the activation statistics are gathered on (a decoder's training text where the workload has it)"),
    device: Optional[str] = DeviceOpt,
    dtype: Optional[str] = DtypeOpt,
    batch: Optional[int] = BatchOpt,
    seq_len: Optional[int] = SeqOpt,
    tokens: Optional[int] = TokensOpt,
    size: str = SizeOpt,
    runs: Optional[int] = typer.Option(None, "--runs", help="timed runs of each mode's model"),
    check_positions: Optional[int] = typer.Option(None, "--check-positions", help="decoders: teacher-forced positions the quality is judged on (default: --tokens; 1024 on held-out text), in windows of --tokens"),
    l2: bool = typer.Option(False, "--l2", help="on a GPU, also read each mode's L2 hit rate through ncu (Nsight Compute): a child process a model, about a minute each"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="write layout.json, layout.csv, metrics.json and report.html here"),
    as_json: bool = JsonOpt,
) -> None:
    """Permute channels for each state transform (2:4, blocks, int4/int8 groups, KV-cache compression) and compare the modes on quality, latency, memory, energy and L2 hit rate, with the gates each meets."""
    with _working(out_dir, not as_json) as progress:
        doc = _api().layout(model, transforms=transform, modes=[m.strip() for m in modes.split(",") if m.strip()], solve_seconds=solve_seconds, calibration_batches=calibration_batches,
                            device=device, dtype=dtype, batch=batch, seq_len=seq_len, tokens=tokens, size=size, runs=runs, l2=l2, check_positions=check_positions, out=out_dir, progress=progress)
    if as_json:
        _print_json(doc)
        return
    verdict = {True: "met", False: "missed", None: "n/a"}
    for m in doc["modes"]:
        q = m["quality"] or {}
        steps = "; ".join(f"{s['step']}: kept {s['importance_kept']:.4f}, error {s['weight_error']:.4f}, {s['permuted_spaces']} space(s) permuted"
                          + (f", KV cache {s['cache_bytes_before']} -> {s['cache_bytes_after']} B" if s.get("cache_bytes_before") is not None else "") for s in m["steps"])
        gates = ", ".join(f"{g['name']} {verdict[g['met']]}" for g in m["gates"])
        out.print(f"{m['mode']}\t{q.get('metric', '')} {q.get('value', '')}\t{steps}\tgates: {gates}", highlight=False)
    for note in doc["notes"]:
        err.print(f"note: {note}", highlight=False)


ExecutorOpt = typer.Option("local", "--executor", help="where jobs run: local (a child process of the worker) or ray (a Ray task on the cluster RAY_ADDRESS names; pip install 'agnitra[ray]')")


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (127.0.0.1: this machine only)"),
    port: int = typer.Option(8000, "--port", help="TCP port"),
    workers: int = typer.Option(1, "--workers", help="worker processes started beside the server to run jobs (0: run `agnitra worker` elsewhere)"),
    data_dir: Path = typer.Option(Path("service-data"), "--data-dir", help="uploaded models and job run folders"),
    max_upload_mb: int = typer.Option(2048, "--max-upload-mb", help="largest model upload accepted"),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="accept uploads that need unpickling (this runs code from them): only for users you trust"),
    cors_origin: Optional[list[str]] = typer.Option(None, "--cors-origin", help="a web origin allowed to call the API from a browser (repeatable)"),
    oidc_issuer: Optional[str] = typer.Option(None, "--oidc-issuer", help="also take OIDC bearer tokens from this issuer (URL; default AGNITRA_OIDC_ISSUER)"),
    oidc_audience: Optional[str] = typer.Option(None, "--oidc-audience", help="the audience those tokens must carry (default AGNITRA_OIDC_AUDIENCE)"),
    oidc_claim_prefix: str = typer.Option("agnitra_", "--oidc-claim-prefix", help="a token's role and project are its claims PREFIXrole and PREFIXproject"),
    rate_limit: int = typer.Option(600, "--rate-limit", help="requests a minute per API key or token subject (0: no limit); over it: 429"),
    executor: str = ExecutorOpt,
) -> None:
    """The REST API and web service over the same core as the CLI, with its job workers."""
    from agnitra.service.executor import check_executor

    check_executor(executor)  # before the service's imports: a missing Ray is one line at once
    from agnitra.service.serve import oidc_settings, serve as run

    arguments.count("--port", port)
    arguments.count("--workers", workers, minimum=0)
    arguments.count("--max-upload-mb", max_upload_mb)
    arguments.count("--rate-limit", rate_limit, minimum=0)
    run(host, port, workers, data_dir, max_upload_mb=max_upload_mb, allow_pickle=allow_pickle, cors_origins=cors_origin,
        oidc=oidc_settings(oidc_issuer, oidc_audience, oidc_claim_prefix), rate_limit=rate_limit, announce=lambda text: err.print(text, highlight=False),
        executor=executor)


@app.command()
def worker(
    data_dir: Path = typer.Option(Path("service-data"), "--data-dir", help="job run folders (the server's --data-dir when on one machine)"),
    jobs: Optional[int] = typer.Option(None, "--jobs", help="stop after this many jobs (default: run until stopped)"),
    executor: str = ExecutorOpt,
) -> None:
    """Take optimization jobs from the service's queue (the store's database) and run them."""
    from agnitra.service.executor import check_executor

    check_executor(executor)  # before the service's imports: a missing Ray is one line at once
    from agnitra.service.serve import run_worker_here

    arguments.count("--jobs", jobs)
    ran = run_worker_here(data_dir, jobs, executor)
    err.print(f"ran {ran} job(s)")


@keys_app.command("create")
def keys_create(
    name: str = typer.Option(..., "--name", help="whose key it is"),
    role: str = typer.Option("viewer", "--role", help="viewer (reads), editor (imports models, submits jobs) or admin (projects, keys, audit log)"),
    project: Optional[str] = typer.Option(None, "--project", help="the one project the key may act on (default: every project)"),
    organisation: Optional[str] = typer.Option(None, "--organisation", help="the organisation whose projects the key may act on (default: every project)"),
) -> None:
    """Make an API key and print it (the only time it is shown; the store keeps its hash)."""
    from agnitra.service.serve import make_key

    out.print(make_key(name, role, project, organisation=organisation), highlight=False)


def main(argv: list[str] | None = None) -> int:
    global _session, out, err
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = {flag: flag in argv for flag in GLOBAL_FLAGS}
    argv = [a for a in argv if a not in GLOBAL_FLAGS]
    streams = UserStreams.of_process()
    _session = _Session(streams, argv=argv, verbose=flags["--verbose"])
    out, err = _consoles(streams)
    try:
        with _signals_interrupt():
            return _run(argv, debug=flags["--debug"])
    except Interrupted as exc:  # arrived while an error above was being reported
        return _interrupted(exc.exit_code)
    finally:
        streams.close()


def run() -> None:
    """The `agnitra` process: main, then an exit that skips the interpreter's teardown (1-1.5 s of
    freeing torch's objects one by one); the atexit functions run and the streams flush first."""
    code = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else 1)


if __name__ == "__main__":
    run()

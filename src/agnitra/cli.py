"""`agnitra`: one entry point, subcommands over the SDK in agnitra.api.

User errors end in one line on stderr and exit code 2; `--debug` shows the traceback. Progress
goes to stderr so `--json` leaves stdout a single JSON document.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agnitra.errors import AgnitraError, UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Agnitra: measure, optimize and verify PyTorch models for inference.")
zoo_app = typer.Typer(no_args_is_help=True, help="Built-in workloads.")
app.add_typer(zoo_app, name="zoo")

out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)

DeviceOpt = typer.Option(None, "--device", help="cpu | cuda | auto (default: AGNITRA_DEVICE, else auto)")
DtypeOpt = typer.Option(None, "--dtype", help="fp32 | fp16 | bf16 (default: the workload's own for the device)")
BatchOpt = typer.Option(None, "--batch", help="batch size")
SeqOpt = typer.Option(None, "--seq-len", help="sequence length (decoders: prompt length)")
ShapeOpt = typer.Option(None, "--input-shape", help="input shape for TorchScript/ONNX, e.g. 1x128:int64 (repeat per input)")
TaskOpt = typer.Option(None, "--task", help="lm | encoder | embedding | classifier | generic (how outputs are compared)")
TokensOpt = typer.Option(None, "--tokens", help="decoders: new tokens per generation")
SizeOpt = typer.Option("full", "--size", help="zoo workloads: full, or tiny (every dimension shrunk, for smoke tests)")
JsonOpt = typer.Option(False, "--json", help="print one JSON document on stdout")
OutOpt = typer.Option(None, "--out", help="write report.json, metrics.csv and report.html here")


@contextmanager
def _progress(enabled: bool):
    if not enabled:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("starting", total=1.0)
        yield lambda message, fraction: bar.update(task, description=message, completed=fraction)


def _emit(report, as_json: bool, out_dir: Optional[Path], render) -> None:
    from agnitra.api import write_reports

    if out_dir is not None:
        paths = write_reports(report, out_dir)
        err.print(f"wrote {', '.join(str(p) for p in paths.values())}")
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        render(report)


@zoo_app.command("list")
def zoo_list() -> None:
    """The built-in workloads with their parameter counts."""
    from agnitra.workloads.registry import zoo_entries

    table = Table(title="Agnitra workload zoo", title_justify="left")
    for col, justify in (("name", "left"), ("task", "left"), ("params", "right"), ("description", "left")):
        table.add_column(col, justify=justify)
    for entry in zoo_entries():
        table.add_row(f"zoo:{entry.name}", entry.task.value, _millions(entry.count_params("full")), entry.description)
    out.print(table)


def _millions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


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
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = OutOpt,
) -> None:
    """Operator table (time, FLOPs, bytes), latency, peak memory and NVML telemetry."""
    from agnitra import api
    from agnitra.report.console import ops_table

    with _progress(not as_json) as progress:
        if progress:
            progress("loading and profiling", 0.1)
        report = api.profile(model, device=device, dtype=dtype, batch=batch, seq_len=seq_len, input_shapes=input_shape, task=task, size=size, runs=runs, warmup=warmup)

    def render(r) -> None:
        _print_device(r.device)
        lat = r.latency_ms
        out.print(f"[bold]{r.workload['name']}[/] ({r.conditions['unit']}, shapes {r.conditions['shapes']}): median {lat.median:.3f} ms, p95 {lat.p95:.3f} ms over {lat.samples} runs")
        out.print(f"FLOPs {r.total_flops / 1e9:.3f} G, bytes moved {r.total_bytes / 1e6:.1f} MB, peak memory {(r.peak_memory_bytes or 0) / 2**20:.1f} MiB ({r.conditions['peak_memory']})")
        if r.nvml:
            out.print(f"GPU: utilisation {r.nvml['utilization_mean']:.0f}%, power {r.nvml['power_mean_w']:.0f} W, energy {r.nvml['energy_j']:.2f} J ({r.nvml['energy_source']})")
        else:
            out.print(f"NVML: {r.nvml_reason}")
        out.print(ops_table(r.ops, limit=20))

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
    no_check: bool = typer.Option(False, "--no-check", help="skip the correctness comparison"),
    no_ops: bool = typer.Option(False, "--no-ops", help="skip the operator breakdown"),
    recipe: Optional[list[str]] = typer.Option(None, "--recipe", help="also measure a recipe against the variants: a recipe.json, or inline as 'int8-weight-only + compile(mode=reduce-overhead)' (repeatable)"),
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = OutOpt,
) -> None:
    """Measure variants of one workload side by side, interleaved, with correctness and roofline."""
    from agnitra import api

    chosen: list = variants.split(",")
    if recipe:
        from agnitra.bench.variants.recipe import RecipeVariant
        from agnitra.transforms.recipe import Recipe

        for text in recipe:
            loaded = Recipe.load_or_parse(text)
            chosen.append(RecipeVariant(loaded, name=f"recipe: {loaded.name}"))
    with _progress(not as_json) as progress:
        report = api.benchmark(
            model, variants=chosen, device=device, dtype=dtype, batch=batch, seq_len=seq_len, tokens=tokens,
            input_shapes=input_shape, task=task, size=size, runs=runs, warmup=warmup, temperature=temperature, top_k=top_k,
            threshold=threshold, check=not no_check, op_breakdown=not no_ops, progress=progress,
        )
    _emit(report, as_json, out_dir, _render_bench)


def _render_bench(report) -> None:
    from agnitra.report.console import bench_table, decode_summary, ops_table, weights_summary

    _print_device(report.device)
    out.print(f"conditions: {json.dumps({k: v for k, v in report.conditions.items() if k != 'shapes'})}")
    out.print(bench_table(report))
    for summary in (decode_summary(report), weights_summary(report)):
        if summary:
            out.print(summary)
    if report.roofline:
        r = report.roofline
        out.print(f"roofline ({r.notes}): {r.flops / 1e9:.3f} GFLOP, {r.bytes / 1e6:.1f} MB compulsory -> floor {r.floor_ms:.4f} ms ({r.bound}-bound, {r.dtype})")
    if report.op_breakdown:
        unit = "decode step" if report.conditions.get("mode") == "decode" else "forward call"
        out.print(ops_table(report.op_breakdown, limit=15, title=f"Operator breakdown of one {unit} (eager)"))
    for note in report.notes:
        out.print(f"[dim]note: {note}[/]")


def _print_device(device) -> None:
    c = device.ceilings
    tflops = ", ".join(f"{k} {v:.1f}" for k, v in c.get("matmul_tflops", {}).items() if v)
    cached = "cached" if c.get("cached") else "measured now"
    out.print(f"device: [bold]{device.name}[/] ({device.kind}, signature {device.signature.get('id')}); ceilings ({cached}): copy {c.get('copy_gbps')} GB/s, matmul TFLOP/s {tflops}")


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
    check_positions: Optional[int] = typer.Option(None, "--check-positions", min=1, help="decoders: teacher-forced positions verified (default: --tokens), in windows of --tokens"),
    transforms: Optional[str] = typer.Option(None, "--transforms", help="comma-separated: search only these transforms"),
    exclude_transforms: Optional[str] = typer.Option(None, "--exclude-transforms", help="comma-separated: search all but these"),
    list_transforms: bool = typer.Option(False, "--list-transforms", help="list the transforms and what each needs"),
    candidate_timeout: str = typer.Option("5m", "--candidate-timeout", help="a candidate running longer is recorded as timed out"),
    peers: Optional[str] = typer.Option(None, "--peers", help="comma-separated peer variants for the final run (default: the best built-in ones)"),
    resume: bool = typer.Option(False, "--resume", help="reuse the candidates already measured in --out"),
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = typer.Option(Path("runs/optimize"), "--out", help="run directory: report, recipe, journal"),
) -> None:
    """Search recipes, verify each against the original, return the fastest correct model."""
    from agnitra import api

    if list_transforms:
        _list_transforms()
        return
    if model is None:
        raise UserError("give a model to optimize, e.g. `agnitra optimize zoo:tinylm`, or --list-transforms")
    if resume and not (out_dir / "candidates.jsonl").is_file():
        raise UserError(f"--resume: {out_dir} holds no earlier run (candidates.jsonl); drop --resume or point --out at it")
    with _progress(not as_json) as progress:
        optimized = api.optimize(
            model, device=device, dtype=dtype, batch=batch, seq_len=seq_len, tokens=tokens, input_shapes=input_shape, task=task, size=size,
            objective=objective, budget=budget, max_error=max_error, min_cosine=min_cosine, min_token_agreement=min_token_agreement, min_sqnr_db=min_sqnr, check_positions=check_positions,
            transforms=transforms.split(",") if transforms else None, exclude_transforms=exclude_transforms.split(",") if exclude_transforms else None,
            candidate_timeout=candidate_timeout,
            peers=peers.split(",") if peers is not None else None, out=out_dir, resume=resume, progress=progress,
        )
    if out_dir is not None:
        err.print(f"wrote {out_dir}/: report.json, report.html, metrics.csv, candidates.csv, recipe.json, agnitra.json")
    _emit(optimized.report, as_json, None, _render_optimize)


def _list_transforms() -> None:
    from agnitra.transforms import all_transforms

    table = Table(title="Transforms", title_justify="left")
    for col in ("name", "stage", "parameters", "what it does", "needs"):
        table.add_column(col, overflow="fold")
    import dataclasses

    for t in all_transforms():
        params = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(t.Params))
        table.add_row(t.name, t.stage, params or "—", t.description, t.requires or "—")
    out.print(table)


def _render_optimize(report) -> None:
    from agnitra.report.console import bench_table, candidates_table

    _print_device(report.bench.device)
    out.print(candidates_table(report))
    out.print(bench_table(report.bench, title="Final interleaved run: baseline, peers, finalists"))
    for item in report.search["not_applicable"]:
        out.print(f"[dim]not applicable: {item['transform']}: {item['reason']}[/]")
    out.print(f"[bold]{report.verdict}[/]")


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
    as_json: bool = JsonOpt,
    out_dir: Optional[Path] = OutOpt,
) -> None:
    """The captured graph: hotspots by module (time, FLOPs, bytes, intensity, bound), graph breaks, op mix."""
    from agnitra import api

    with _progress(not as_json) as progress:
        if progress:
            progress("capturing, annotating and timing", 0.2)
        report = api.inspect(model, device=device, dtype=dtype, batch=batch, seq_len=seq_len, input_shapes=input_shape, task=task, size=size, runs=runs, timed=not no_time)
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
    out.print(hotspot_table(report.hotspots, limit=limit))
    out.print(op_mix_table(ir))
    breaks = graph_breaks_table(ir)
    out.print(breaks if breaks is not None else "graph breaks: none")
    for note in ir.notes:
        out.print(f"[dim]note: {note}[/]")


@app.command("tune-matmul")
def tune_matmul_cmd(
    dim: Optional[int] = typer.Option(None, "--dim", help="square problem: M = N = K = dim"),
    shape: Optional[str] = typer.Option(None, "--shape", help="M,N,K (instead of --dim)"),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32"),
    runs: int = typer.Option(20, "--runs", help="timed runs per configuration"),
    kernel: str = typer.Option("matmul", "--kernel", help="matmul | matmul_bias_gelu"),
    max_trials: int = typer.Option(40, "--max-trials", min=1, help="configurations tried; every one when this covers the space, else Optuna TPE"),
    device: Optional[str] = DeviceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Autotune Agnitra's matmul template for one shape and compare it with torch.matmul (cuBLAS)."""
    from agnitra import api
    from agnitra.report.schema import to_dict

    if (dim is None) == (shape is None):
        raise UserError("give either --dim N or --shape M,N,K")
    problem = (dim, dim, dim) if dim else _parse_shape(shape)

    def show(trial) -> None:
        if not as_json:
            status = f"{trial.ms:.4f} ms" if trial.ok else f"failed: {trial.reason[:80]}"
            out.print(f"  {trial.config}  {status}", highlight=False)

    tuning = api.tune_matmul(problem, dtype=dtype, runs=runs, device=device, kernel=kernel, max_trials=max_trials, progress=show)
    r = tuning.result
    if as_json:
        sys.stdout.write(json.dumps({"shape": list(problem), "dtype": r.dtype, "best": r.best, "best_ms": r.best_ms, "best_tflops": tuning.tflops(r.best_ms), "default": r.default, "default_ms": r.default_ms, "head_to_head_ms": tuning.best_ms, "torch_matmul_ms": tuning.torch_ms, "torch_tflops": tuning.tflops(tuning.torch_ms), "vs_torch": tuning.vs_torch, "strategy": r.strategy, "trials": to_dict(r.trials)}, indent=2) + "\n")
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
    from agnitra import api
    from agnitra.device import resolve_device
    from agnitra.report.schema import to_dict

    report = api.describe_device(resolve_device(device), refresh=refresh)
    if as_json:
        sys.stdout.write(json.dumps(to_dict(report), indent=2) + "\n")
        return
    _print_device(report)
    for key, value in report.signature.items():
        out.print(f"  {key}: {value}")


@app.command()
def version() -> None:
    """Versions of Agnitra and what it runs on."""
    from agnitra.telemetry.signature import software_versions

    for name, value in software_versions().items():
        out.print(f"{name} {value or '-'}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        app(args=argv, prog_name="agnitra", standalone_mode=False)
    except UserError as exc:
        if debug:
            raise
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return exc.exit_code
    except AgnitraError as exc:
        if debug:
            raise
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return 1
    except (typer.Abort, KeyboardInterrupt):
        err.print("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - anything else is a defect; say so in one line
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        if debug:
            raise
        from agnitra.errors import first_line

        err.print(f"[red]internal error:[/] {first_line(exc)} (rerun with --debug for the traceback, and please report it)", highlight=False)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

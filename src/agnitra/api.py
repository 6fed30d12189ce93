"""The SDK: each function composes the stages; the CLI and (later) the service call only these."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from agnitra.bench.harness import BenchConfig, Progress
from agnitra.bench.harness import benchmark as run_harness
from agnitra.config import Settings, load_settings
from agnitra.device import resolve_device
from agnitra.errors import UserError
from agnitra.report.schema import BenchReport, DeviceReport, InspectReport, ProfileReport
from agnitra.telemetry.ceilings import load_or_measure
from agnitra.telemetry.profile import profile_workload
from agnitra.telemetry.signature import device_signature, signature_id
from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.loaders import load_workload, smoke_test
from agnitra.workloads.registry import BuildOptions

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}

def parse_dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    if name.lower() not in DTYPES:
        raise UserError(f"unknown dtype '{name}'; use one of: fp32, fp16, bf16")
    return DTYPES[name.lower()]


def describe_device(device: torch.device, settings: Settings | None = None, refresh: bool = False) -> DeviceReport:
    """Signature and measured ceilings (cached per signature under the cache dir)."""
    settings = settings or load_settings()
    signature = device_signature(device)
    ceilings = load_or_measure(device, signature, settings.cache_path, refresh=refresh)
    return DeviceReport(name=signature["name"], kind=device.type, signature={**signature, "id": signature_id(signature)}, ceilings=ceilings)


def prepare_workload(
    model: str | Workload | torch.nn.Module,
    example_inputs: Sequence | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: str | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
    tokens: int | None = None,
    input_shapes: list[str] | None = None,
    task: str | None = None,
    size: str = "full",
) -> tuple[Workload, torch.device]:
    """A runnable Workload on the resolved device, checked once on its example inputs."""
    dev = device if isinstance(device, torch.device) else resolve_device(device or load_settings().device)
    if isinstance(model, Workload):
        workload = model
    elif isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise UserError("a model needs example_inputs (a tuple of tensors it accepts)")
        inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
        workload = Workload(name=type(model).__name__, model=model.to(dev).eval(), example_inputs=tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs), task=TaskKind(task or "generic"), source="python")
        workload.batch = next((t.shape[0] for t in workload.example_inputs if isinstance(t, torch.Tensor) and t.dim() > 0), 1)
    else:
        options = BuildOptions(device=dev, dtype=parse_dtype(dtype), batch=batch, seq_len=seq_len, tokens=tokens, size=size)
        workload = load_workload(str(model), options, input_shapes=input_shapes, task=task)
    if dtype and not (isinstance(model, str) and model.startswith("zoo:")):
        _cast(workload, parse_dtype(dtype))
    smoke_test(workload)
    return workload, dev


def _cast(workload: Workload, dtype: torch.dtype) -> None:
    """--dtype for a user model: parameters and floating-point example inputs."""
    from agnitra.ort.session import OrtModule

    if isinstance(workload.model, OrtModule):
        raise UserError("--dtype does not apply to an ONNX model: its precision is fixed in the file")
    workload.model = workload.model.to(dtype)
    workload.example_inputs = tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in workload.example_inputs)
    if workload.make_inputs is not None:
        make = workload.make_inputs
        workload.make_inputs = lambda seed: tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in make(seed))


def profile(model, example_inputs=None, *, device=None, runs: int = 50, warmup: int = 5, settings: Settings | None = None, **load_options) -> ProfileReport:
    """Operator table, latency, peak memory and NVML telemetry of one workload."""
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
    progress: Progress | None = None,
    settings: Settings | None = None,
    **load_options,
) -> BenchReport:
    """Measure several variants of one workload side by side in one interleaved run."""
    if runs is not None and runs < 1 or warmup is not None and warmup < 0:
        raise UserError("--runs must be at least 1 and --warmup at least 0")
    names = [v.strip() for v in variants if v.strip()]
    if not names:
        raise UserError("no variants given; e.g. --variants eager,compile")
    from agnitra.bench.variants import get_variant

    for name in names:
        get_variant(name)  # unknown names fail before anything is built
    workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    config = BenchConfig(variants=names, runs=runs, warmup=warmup, temperature=temperature, top_k=top_k, check=check, op_breakdown=op_breakdown, threshold=threshold)
    return run_harness(workload, dev, describe_device(dev, settings), config, progress)


def inspect(model, example_inputs=None, *, device=None, runs: int = 10, warmup: int = 3, timed: bool = True, settings: Settings | None = None, **load_options) -> InspectReport:
    """Capture the graph, annotate costs and measured time, roll up hotspots, compute the signature."""
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
        workload={"name": workload.name, "source": workload.source, "task": workload.task.value, "params": workload.param_count(), "dtype": str(workload.dtype).replace("torch.", ""), "unit": "one decode step (model forward)" if workload.decoder else "one forward call"},
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
    writer = write_bench_report if isinstance(report, BenchReport) else write_profile_report
    return writer(report, Path(out_dir))

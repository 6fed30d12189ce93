"""Measured time on an ONNX model's IR, from ONNX Runtime's own profiler.

The session is profiled with graph optimisations off so each kernel is one node of the file and
maps one-to-one onto the IR (ORT's fusions would rename and merge them); the wall time of the
optimised session is measured apart and reported beside it.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from agnitra.ir.graph import GraphIR
from agnitra.ort.session import OrtModule, provider_for
from agnitra.telemetry.timing import time_calls


def _profiled_session(path: Path, device: torch.device, workdir: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_profiling = True
    options.profile_file_prefix = str(workdir / "ort_profile")
    if device.type == "cpu":
        options.intra_op_num_threads = torch.get_num_threads()
    return ort.InferenceSession(str(path), options, providers=[provider_for(device)])


def node_times_us(path: Path, inputs: tuple, device: torch.device, runs: int) -> dict[str, float]:
    """Kernel time per ONNX node name, per run, in microseconds."""
    with tempfile.TemporaryDirectory(prefix="agnitra-ortprof-") as tmp:
        session = _profiled_session(path, device, Path(tmp))
        module = OrtModule(session, device, path)
        module(*inputs)  # warm-up, outside the counted runs below
        for _ in range(runs):
            module(*inputs)
        events = json.loads(Path(session.end_profiling()).read_text())
    samples: dict[str, list[float]] = defaultdict(list)
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            samples[name[: -len("_kernel_time")]].append(float(e.get("dur", 0.0)))
    # the median per node leaves the (profiled) warm-up call out of the figure
    return {node: float(np.median(durations)) for node, durations in samples.items()}


def attribute_onnx_time(ir: GraphIR, model: OrtModule, inputs: tuple, device: torch.device, runs: int = 10) -> None:
    measured = float(np.median(time_calls(lambda _: model(*inputs), max(runs, 3), device)))
    per_node = node_times_us(model.path, inputs, device, runs)
    step_us = sum(per_node.values()) or 1.0
    modules: dict[str, float] = defaultdict(float)
    for node in ir.nodes:
        node.time_us = per_node.get(node.name, 0.0)
        node.share = node.time_us / step_us
        modules[node.module] += node.time_us
    named = sum(v for k, v in modules.items() if k)
    ir.timing = {
        "resource": "host" if device.type == "cpu" else "device",
        "runs": runs,
        "measured_ms": measured,
        "profiled_ms": step_us / 1e3,
        "device_busy_ms": None,
        "step_us": step_us,
        "attributed_share": named / step_us,
        "node_share": sum(node.time_us for node in ir.nodes) / step_us,
        "modules": dict(modules),
    }
    ir.notes.append(
        f"node times from ONNX Runtime's profiler with graph optimisations off ({step_us / 1e3:.2f} ms of kernels per call); "
        f"the optimised session measures {measured:.2f} ms per call"
    )

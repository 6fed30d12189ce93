"""Export a workload for ONNX Runtime, the way a knowledgeable user would.

Transformer encoders export through the TorchScript-based exporter with eager attention, which
ONNX Runtime's transformer optimizer fuses into Attention/SkipLayerNorm/EmbedLayerNorm; other
models try the same exporter and then the dynamo exporter. Weight-only int8 uses ONNX Runtime's
dynamic quantisation, per channel.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Protocol

import torch

from agnitra.errors import NotApplicable, first_line
from agnitra.pytree import tensor_leaves


@contextlib.contextmanager
def eager_attention(model: torch.nn.Module, wanted: bool):
    """Temporarily switch a zoo transformer to eager attention (the form ORT's optimizer fuses)."""
    switch = getattr(model, "use_eager_attention", None)
    if not (wanted and callable(switch)):
        yield
        return
    restore = switch()
    try:
        yield
    finally:
        if callable(restore):
            restore()


class Exportable(Protocol):
    """What an export reads of a workload: its model, example inputs and hints."""

    model: torch.nn.Module
    example_inputs: tuple
    hints: dict


def input_names(workload: Exportable) -> list[str]:
    """The ONNX graph's input names, in the order of the workload's example inputs."""
    return list(workload.hints.get("input_names") or [f"input_{i}" for i in range(len(workload.example_inputs))])


def _names(workload: Exportable) -> tuple[list[str], list[str]]:
    with torch.no_grad():
        n_out = len(tensor_leaves(workload.model(*workload.example_inputs)))
    return input_names(workload), [f"output_{i}" for i in range(n_out)]


def export_onnx(workload: Exportable, path: Path, opset: int = 17) -> str:
    """Write `path`; returns which exporter succeeded. Dim 0 (batch) of inputs/outputs is dynamic."""
    input_names, output_names = _names(workload)
    dynamic = {n: {0: "batch"} for n in input_names + output_names}
    errors = []
    with eager_attention(workload.model, bool(workload.hints.get("eager_attention_for_onnx"))), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dynamo in (False, True):
            try:
                torch.onnx.export(
                    workload.model, workload.example_inputs, str(path), dynamo=dynamo, opset_version=opset,
                    input_names=input_names, output_names=output_names, dynamic_axes=dynamic if not dynamo else None,
                    **({"external_data": False} if dynamo else {}),
                )
                return "dynamo" if dynamo else "torchscript"
            except Exception as exc:  # noqa: BLE001 - both exporters raise many types
                errors.append(f"{'dynamo' if dynamo else 'torchscript'} exporter: {first_line(exc)}")
    raise NotApplicable("the model does not export to ONNX: " + "; ".join(errors))


def optimize_transformer(path: Path, out: Path, hints: dict, use_gpu: bool) -> dict:
    """Run ORT's transformer optimizer when the workload says what it is; returns fused-op counts."""
    from onnxruntime.transformers import optimizer

    model = optimizer.optimize_model(
        str(path), model_type=hints["onnx_model_type"], num_heads=hints.get("num_heads", 0),
        hidden_size=hints.get("hidden_size", 0), use_gpu=use_gpu,
    )
    model.save_model_to_file(str(out))
    return {k: v for k, v in model.get_fused_operator_statistics().items() if v}


def quantize_int8(path: Path, out: Path) -> None:
    """Dynamic int8: weights per channel, activations quantised on the fly (CPU).

    The transformer optimizer's fused ops (Attention, SkipLayerNorm) are in a domain ONNX shape
    inference does not know; their outputs are float, which `DefaultTensorType` tells the quantiser.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(path), str(out), weight_type=QuantType.QInt8, per_channel=True,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def build_ort_model(workload: Exportable, workdir: Path, device: torch.device, optimize: bool = True, int8: bool = False) -> tuple[Path, list[str]]:
    """Export, then (when the hints say what it is) fuse, then (optionally) quantise, in `workdir`.

    Returns the path of the model to run and a note per step (the `onnxruntime` transform and the
    `onnxruntime` benchmark variants both build through here).
    """
    path = workdir / "model.onnx"
    notes = [f"{export_onnx(workload, path)} export"]
    if optimize and "onnx_model_type" in workload.hints:
        fused = optimize_transformer(path, workdir / "model.opt.onnx", workload.hints, use_gpu=device.type == "cuda")
        path = workdir / "model.opt.onnx"
        notes.append(f"transformer optimizer fused {fused}")
    if int8:
        quantize_int8(path, workdir / "model.int8.onnx")
        path = workdir / "model.int8.onnx"
        notes.append("dynamic int8, per-channel weights")
    return path, notes

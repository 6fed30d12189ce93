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
from agnitra.pytree import fresh_copy, sequence_length, tensor_leaves


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


# The TorchScript exporter's warnings where a tensor's value became a Python value during the trace:
# the exported graph holds the path and the constants of the example inputs
FROZEN_VALUE_WARNINGS = ("Converting a tensor to a Python",)


def _axes(workload: Exportable) -> dict[str, dict[int, str]]:
    """Dynamic axes of the export: dim 0 (batch) of every input and output, and dim 1 of token
    inputs and of outputs of their sequence length (callers send other lengths)."""
    with torch.no_grad():
        outputs = tensor_leaves(workload.model(*fresh_copy(workload.example_inputs)))
    seq = sequence_length(workload.example_inputs)
    axes = {}
    for name, tensor in [*zip(input_names(workload), workload.example_inputs), *((f"output_{i}", t) for i, t in enumerate(outputs))]:
        axes[name] = {0: "batch"}
        if seq and isinstance(tensor, torch.Tensor) and tensor.dim() >= 2 and tensor.shape[1] == seq:
            axes[name][1] = "sequence"
    return axes


def export_onnx(workload: Exportable, path: Path, opset: int = 17) -> str:
    """Write `path`; returns which exporter succeeded. Dim 0 (batch) of inputs/outputs is dynamic.
    A trace that read a tensor's value into Python is refused: the graph would answer every input
    as it answered the example's."""
    dynamic = _axes(workload)
    inputs, outputs = input_names(workload), [name for name in dynamic if name.startswith("output_")]
    errors = []
    with eager_attention(workload.model, bool(workload.hints.get("eager_attention_for_onnx"))):
        for dynamo in (False, True):
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.onnx.export(
                        workload.model, fresh_copy(workload.example_inputs), str(path), dynamo=dynamo, opset_version=opset,
                        input_names=inputs, output_names=outputs, dynamic_axes=dynamic if not dynamo else None,
                        **({"external_data": False} if dynamo else {}),
                    )
            except Exception as exc:  # noqa: BLE001 - both exporters raise many types
                errors.append(f"{'dynamo' if dynamo else 'torchscript'} exporter: {first_line(exc)}")
                continue
            _refuse_frozen_values(caught, getattr(workload, "behaviour", None))
            return "dynamo" if dynamo else "torchscript"
    raise NotApplicable("the model does not export to ONNX: " + "; ".join(errors))


def _refuse_frozen_values(caught: list[warnings.WarningMessage], behaviour) -> None:
    """Refuse a trace that turned a tensor into a Python value where the model, run eagerly, reads
    its inputs' values (the probe's `value_reads`, workloads.behaviour): the trace warns for shapes
    too (they are tensors while tracing), which the other-shape check covers."""
    reads = {read.rsplit(" at ", 1)[-1] for read in getattr(behaviour, "value_reads", None) or []}
    frozen = sorted({f"{Path(w.filename).name}:{w.lineno}" for w in caught if str(w.message).startswith(FROZEN_VALUE_WARNINGS)} & reads)
    if frozen:
        raise NotApplicable(f"the ONNX export froze the value the model reads from its inputs at {', '.join(frozen[:3])}: "
                            "the exported graph would answer every input as the example inputs took it")


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

"""Agnitra's IR: capture (torch.export, dynamo fallback, ONNX), costs, measured time, signature."""

from __future__ import annotations

import torch

from agnitra.ir.capture import capture
from agnitra.ir.graph import KINDS, GraphBreak, GraphIR, IRNode
from agnitra.ir.hotspots import Hotspot, covering, module_hotspots, roofline_class
from agnitra.ir.signature import Signature, signature
from agnitra.workloads.base import Workload

__all__ = ["KINDS", "GraphBreak", "GraphIR", "Hotspot", "IRNode", "Signature", "capture", "capture_workload", "covering", "module_hotspots", "roofline_class", "signature"]


def capture_workload(workload: Workload) -> GraphIR:
    """The IR of a workload's unit of work: its forward call (decoders: one decode step's forward)."""
    from agnitra.ort.session import OrtModule

    if isinstance(workload.model, OrtModule):
        from agnitra.ir.onnx_import import import_onnx

        shapes = {name: list(t.shape) for name, t in zip(workload.model.input_names, workload.example_inputs)}
        return import_onnx(workload.model.path, input_shapes=shapes, name=workload.name)
    return capture(workload.model, workload.example_inputs, workload.name)


def annotate_bounds(ir: GraphIR, ceilings: dict, dtype: torch.dtype) -> None:
    """Each node's roofline class on this device: memory- or compute-bound."""
    for node in ir.nodes:
        node.bound = roofline_class(node.flops, node.bytes, ceilings, dtype) if (node.flops or node.bytes) else ""

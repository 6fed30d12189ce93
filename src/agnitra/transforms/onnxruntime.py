"""`onnxruntime`: the (already transformed) model exported to ONNX and run by ONNX Runtime.

The export is the one the `onnxruntime` benchmark variants use (agnitra.ort.export): the
TorchScript exporter with eager attention for transformers, ORT's transformer optimizer fusions
when the workload's hints say what the model is, and optionally dynamic int8 (CPU). The result
is an `OrtBackend`: called with the model's positional tensors, it returns the model's own
output structure (tuples, dicts, transformers ModelOutputs) with the model's dtypes and device.
Runtime wrappers below it (threads, compile, CUDA graphs) are peeled off before the export:
ONNX Runtime replaces how the model runs; a `threads` count becomes the session's thread count.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from agnitra.errors import NotApplicable, WorkloadError, check
from agnitra.ort.export import build_ort_model, input_names
from agnitra.ort.session import OrtModule, open_session, provider_for
from agnitra.transforms.attention import own_configs
from agnitra.transforms.base import Choice, Step, Transform, TransformContext, register_transform
from agnitra.transforms.cudagraphs import CudaGraphRunner
from agnitra.transforms.patcher import unwrap
from agnitra.transforms.threads import ThreadsWrapper
from agnitra.transforms.wrappers import ModelWrapper
from agnitra.pytree import fresh_copy
from agnitra.workloads.behaviour import check_not_frozen

BF16_REASON = "ONNX Runtime has few bfloat16 kernels; keep the model in fp32 (or fp16 on a GPU) for ONNX Runtime"
CONSTANT_LEAVES = (int, float, bool, str, type(None))


@dataclass
class OutputStructure:
    """How the model's outputs nest, and each tensor's dtype and device, recorded on example inputs."""

    spec: Any  # pytree spec of the whole output
    leaves: list[Any]  # non-tensor leaves as they were; None where a tensor goes
    tensor_slots: list[int]  # leaf index of each tensor output, in ONNX output order
    tensor_meta: list[tuple[torch.dtype, torch.device]]

    @classmethod
    def record(cls, outputs: Any) -> "OutputStructure":
        leaves, spec = tree_flatten(outputs)
        for leaf in leaves:
            if not isinstance(leaf, (torch.Tensor, *CONSTANT_LEAVES)):
                raise NotApplicable(f"the model returns a {type(leaf).__name__}, which an ONNX model cannot output")
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        check(slots, "the model returns no tensors")
        meta = [(leaves[i].dtype, leaves[i].device) for i in slots]
        constants = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        return cls(spec, constants, slots, meta)

    def rebuild(self, tensors: tuple[torch.Tensor, ...]) -> Any:
        if len(tensors) != len(self.tensor_slots):
            raise WorkloadError(f"the ONNX model returned {len(tensors)} outputs where the model returns {len(self.tensor_slots)}")
        leaves = list(self.leaves)
        for slot, tensor, (dtype, device) in zip(self.tensor_slots, tensors, self.tensor_meta):
            leaves[slot] = tensor if (tensor.dtype, tensor.device) == (dtype, device) else tensor.to(device=device, dtype=dtype)
        return tree_unflatten(leaves, self.spec)


class FlatOutputs(ModelWrapper):
    """The model with its output flattened to a tuple of tensors (pytree order): what is exported."""

    def forward(self, *args):
        leaves, _ = tree_flatten(self.inner(*args))
        return tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))


class OrtBackend(ModelWrapper):
    """Runs an ONNX Runtime session in place of `inner` (the torch model it was exported from)."""

    def __init__(self, inner: nn.Module, session: OrtModule, feed_indices: list[int], n_inputs: int, structure: OutputStructure, notes: list[str]) -> None:
        super().__init__(inner)
        self.session = session
        self.feed_indices = feed_indices  # which positional inputs the graph takes (exporters drop unused ones)
        self.n_inputs = n_inputs
        self.structure = structure
        self.notes = notes

    def forward(self, *args, **kwargs):
        if kwargs:
            raise WorkloadError(f"the ONNX Runtime model takes positional inputs only; got keyword arguments {', '.join(kwargs)}")
        if len(args) != self.n_inputs:
            raise WorkloadError(f"the ONNX Runtime model takes {self.n_inputs} inputs, got {len(args)}")
        return self.structure.rebuild(self.session(*(args[i] for i in self.feed_indices)))


def peel_runtime_wrappers(model: nn.Module) -> tuple[nn.Module, int]:
    """The model under the outer runtime wrappers, and the `threads` count found among them (0: none).

    Runtime transforms wrap after module transforms, so their wrappers are the outermost layers.
    """
    threads = 0
    while True:
        if isinstance(model, ThreadsWrapper):
            threads = threads or model.count
        elif not isinstance(model, CudaGraphRunner) and not _is_compiled(model):
            return model, threads
        model = model.inner


def _is_compiled(model: nn.Module) -> bool:
    return type(model) is ModelWrapper and model._call is not None and model._call is not model.inner


def _feed_indices(exported: list[str], session: OrtModule) -> list[int]:
    """Positions of the session's inputs among the exported names (in the model's argument order)."""
    if all(name in exported for name in session.input_names):
        return [exported.index(name) for name in session.input_names]
    if len(session.input_names) == len(exported):  # an exporter that renamed them: same order
        return list(range(len(exported)))
    raise WorkloadError(f"the ONNX model's inputs ({', '.join(session.input_names)}) do not match the model's ({', '.join(exported)})")


def _check_no_bf16(model: nn.Module) -> None:
    """After `precision` the model may hold bf16 weights that the workload's dtype does not show."""
    check(not any(p.dtype == torch.bfloat16 for p in model.parameters()), BF16_REASON)


@register_transform
class OnnxRuntime(Transform):
    name = "onnxruntime"
    description = "export to ONNX and run with ONNX Runtime (transformer fusions; optional dynamic int8 on the CPU)"
    requires = "onnxruntime (onnxruntime-gpu for CUDA); a forward model with tensor inputs that exports to ONNX"
    stage = "backend"

    @dataclass
    class Params:
        int8: bool = False
        optimize: bool = True  # ORT's transformer optimizer, when the workload's hints say what the model is
        threads: int = 0  # 0: torch's thread count (or the `threads` transform's)

    ACCEPTS = frozenset({"precision", "channels-last", "sdpa"})  # module transforms an ONNX export keeps

    def lossy(self, params: dict) -> bool:
        return bool(params.get("int8"))

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (("int8", True),), 2.5 if ctx.device.type == "cpu" else 1.0), Choice(self.name, (), 1.1)]

    def conflict(self, params, others: list[Step], ctx: TransformContext) -> str | None:
        from agnitra.transforms.base import get_transform

        if any(get_transform(s.transform).stage == "runtime" for s in others):
            return "ONNX Runtime runs the exported model itself: no runtime transform goes on top"
        kept = [s.transform for s in others if s.transform not in self.ACCEPTS]
        if kept:
            return f"an ONNX export keeps only {', '.join(sorted(self.ACCEPTS))}, not {', '.join(kept)}"
        if any(s.transform == "precision" and s.params.get("dtype") == "bf16" for s in others):
            return "ONNX Runtime has few bf16 kernels"
        return None

    def check(self, ctx: TransformContext, params) -> None:
        check(params.threads >= 0, f"onnxruntime threads must be 0 (torch's count) or more, not {params.threads}")
        check(not ctx.decoder, "decoders run in Agnitra's static-KV-cache decode loop, which is not exported to ONNX")
        check(not isinstance(unwrap(ctx.workload.model), OrtModule), "the model is already an ONNX model run by ONNX Runtime")
        check(not (params.int8 and ctx.device.type != "cpu"), "ONNX Runtime dynamic int8 quantisation targets the CPU provider")
        check(ctx.dtype != torch.bfloat16, BF16_REASON)
        check(all(isinstance(t, torch.Tensor) for t in ctx.workload.example_inputs), "ONNX models take tensors; the workload passes other values")
        check_not_frozen(ctx.workload, "an ONNX export")
        provider_for(ctx.device)  # NotApplicable early, before a costly export

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        model, wrapped_threads = peel_runtime_wrappers(model)
        _check_no_bf16(model)
        own_configs(model)  # the export switches attention to eager for a while: in the copy only
        with torch.no_grad():
            structure = OutputStructure.record(model(*fresh_copy(ctx.workload.example_inputs)))
        workload = dataclasses.replace(ctx.workload, model=FlatOutputs(model))
        workdir = Path(tempfile.mkdtemp(prefix="agnitra-ort-"))
        try:
            path, notes = build_ort_model(workload, workdir, ctx.device, optimize=params.optimize, int8=params.int8)
            session = OrtModule(open_session(path, ctx.device, params.threads or wrapped_threads or None), ctx.device, path=path)
            feeds = _feed_indices(input_names(workload), session)
            backend = OrtBackend(model, session, feeds, len(ctx.workload.example_inputs), structure, notes)
        except BaseException:
            shutil.rmtree(workdir, True)
            raise
        weakref.finalize(backend, shutil.rmtree, workdir, True)  # the files live as long as the session
        return backend

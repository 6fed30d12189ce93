"""`cuda-graphs`: a forward model's kernels captured once into a CUDA graph and replayed per call.

Follows PyTorch's CUDA-graphs recipe (docs: notes/cuda, "CUDA Graphs"): warm-up iterations on a
side stream, capture under `torch.cuda.graph` on static input buffers, and per call copy the
new inputs into those buffers, replay, and return clones of the static outputs (the next
replay overwrites them). A graph is valid for the shapes and dtypes it was captured with: a call
with new ones captures a graph of its own (as torch.compile's reduce-overhead mode records one per
shape), up to MAX_GRAPHS; past that, or for inputs that are not tensors, the call is refused with
an error naming the shapes, never silently run another way.
Decoders get CUDA graphs through `compile` mode=reduce-overhead on their decode step instead.
With `compile` in a mode that captures no graphs itself (default, max-autotune-no-cudagraphs) the
graph is captured around the compiled forward (`order` puts this wrapper outside compile's);
the modes that capture their own (reduce-overhead, max-autotune) do not go with it.

A forward that synchronises with the host (a Python `if` on a GPU tensor: transformers' BART
encoder layers test `torch.isfinite(h).all()` in fp16) cannot be captured: the capture's first
error and the model's line it came from are said, as not applicable, and the process is marked
spoiled (`device.mark_spoiled`: torch leaves its CUDA random-number generator in capture mode, and
the next random tensor on the GPU raises), so a search's worker is replaced. (A check beforehand under
`torch.cuda.set_sync_debug_mode("error")` was tried and not kept: transformers' masks take
another path while a stream is capturing, and gpt2 and mistral, which capture, were refused.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import linecache
import os

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from agnitra.errors import NotApplicable, WorkloadError, check
from agnitra.transforms.base import Choice, Step, Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import ModelWrapper
from agnitra.workloads.behaviour import check_not_frozen


def _signature(tensors) -> list[tuple[tuple[int, ...], torch.dtype]]:
    return [(tuple(t.shape), t.dtype) for t in tensors]


def _describe(signature) -> str:
    return ", ".join(f"{'x'.join(map(str, shape)) or 'scalar'} {str(dtype).replace('torch.', '')}" for shape, dtype in signature)


GRAPH_MODES = ("reduce-overhead", "max-autotune")  # compile modes that capture CUDA graphs themselves
MAX_GRAPHS = 8  # shapes captured at most; each graph keeps its own static buffers


def check_tensors(given: tuple, kwargs: dict) -> None:
    """Raise unless the call passes tensors only, positionally (what a graph can replay)."""
    if kwargs:
        raise WorkloadError(f"the CUDA graph takes positional inputs only; got keyword arguments {', '.join(kwargs)}")
    if not all(isinstance(t, torch.Tensor) for t in given):
        raise WorkloadError("the CUDA graph takes tensors only; got " + ", ".join(type(t).__name__ for t in given))


def _user_line(exc: BaseException) -> str:
    """Where the exception was raised in the model's own code (the innermost frame outside torch):
    'file.py:LINE `code`', or '' where every frame is torch's."""
    torch_dir = os.path.dirname(torch.__file__)
    found, tb = "", exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(torch_dir) and filename != __file__:
            code = linecache.getline(filename, tb.tb_lineno).strip()
            found = f"{os.path.basename(filename)}:{tb.tb_lineno}" + (f" `{code}`" if code else "")
        tb = tb.tb_next
    return found


def _capture_failure(exc: BaseException) -> NotApplicable:
    """A failed capture as one line: the first error (the one that invalidated the capture) and
    the model's line it came from."""
    first = exc
    while isinstance(first.__context__, RuntimeError):  # torch.AcceleratorError is one
        first = first.__context__
    where = _user_line(first)
    message = str(first).strip().splitlines()[0] if str(first).strip() else type(first).__name__
    return NotApplicable(f"the forward could not be captured as a CUDA graph: {message}{' at ' + where if where else ''}")


class _Graph:
    """One captured graph: its static input buffers and outputs."""

    def __init__(self, inner: nn.Module, example_inputs: tuple, device: torch.device, warmup: int) -> None:
        self.static_inputs = tuple(t.detach().to(device).clone() for t in example_inputs)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(device), torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up: lazy init, cuBLAS workspaces, autotuning
                for _ in range(warmup):
                    inner(*self.static_inputs)
            torch.cuda.current_stream().wait_stream(side)
            try:
                with torch.cuda.graph(self.graph):
                    outputs = inner(*self.static_inputs)
            except RuntimeError as exc:  # torch.AcceleratorError is one
                from agnitra.device import mark_spoiled

                mark_spoiled("a CUDA-graph capture failed: CUDA's random-number generator stays in capture mode in this process")
                raise _capture_failure(exc) from exc
        self.static_outputs, self.output_spec = tree_flatten(outputs)

    def replay(self, args: tuple) -> Any:
        for static, new in zip(self.static_inputs, args):
            if new.data_ptr() != static.data_ptr():
                static.copy_(new)
        self.graph.replay()
        return tree_unflatten([o.clone() if isinstance(o, torch.Tensor) else o for o in self.static_outputs], self.output_spec)


class CudaGraphRunner(ModelWrapper):
    """Replays `inner(*inputs)` captured as a CUDA graph, one graph per input shape."""

    def __init__(self, inner: nn.Module, example_inputs: tuple, device: torch.device, warmup: int = 3) -> None:
        super().__init__(inner)
        self.device, self.warmup = device, warmup
        self.graphs: dict[tuple, _Graph] = {}
        self._graph_for(tuple(example_inputs))

    def _graph_for(self, args: tuple) -> _Graph:
        signature = tuple(_signature(args))
        if signature not in self.graphs:
            if len(self.graphs) >= MAX_GRAPHS:
                captured = "; ".join(_describe(s) for s in self.graphs)
                raise WorkloadError(f"the CUDA graphs were captured for {MAX_GRAPHS} input shapes ({captured}) and will not capture ({_describe(signature)}); leave out cuda-graphs for inputs of many shapes")
            self.graphs[signature] = _Graph(self.inner, args, self.device, self.warmup)
        return self.graphs[signature]

    def forward(self, *args, **kwargs):
        check_tensors(args, kwargs)
        return self._graph_for(args).replay(args)


@register_transform
class CudaGraphs(Transform):
    name = "cuda-graphs"
    description = "the forward pass captured once as a CUDA graph and replayed (no per-kernel launch cost)"
    requires = "an NVIDIA GPU; a forward (non-decoder) workload with tensor inputs (a graph is captured per input shape)"
    stage = "runtime"

    @dataclass
    class Params:
        warmup: int = 3

    order = 70  # outermost runtime wrapper: it captures what the others built

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.8)]

    def conflict(self, params, others: list[Step], ctx: TransformContext) -> str | None:
        for step in others:
            if step.transform == "compile" and step.params.get("mode") in GRAPH_MODES:
                return f"compile mode={step.params['mode']} captures CUDA graphs itself"
        return None

    def prior_factor(self, params, others: list[Step], ctx: TransformContext) -> float:
        # after Inductor's fusion fewer launches are left to save than in eager mode; compile's own
        # graphs (reduce-overhead) ranked ahead of this pair (not yet measured against each other)
        return 0.6 if any(s.transform == "compile" for s in others) else 1.0

    def check(self, ctx: TransformContext, params) -> None:
        check(params.warmup >= 1, "CUDA-graph capture needs at least one warm-up call")
        check(ctx.device.type == "cuda", f"CUDA graphs need a GPU; this run is on {ctx.device.type}")
        check(not ctx.decoder, "decoders get CUDA graphs through compile mode=reduce-overhead on their decode step")
        check(all(isinstance(t, torch.Tensor) for t in ctx.workload.example_inputs), "CUDA graphs capture tensor inputs only; the workload passes other values")
        check_not_frozen(ctx.workload, "a CUDA graph")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        return CudaGraphRunner(model, ctx.workload.example_inputs, ctx.device, params.warmup)

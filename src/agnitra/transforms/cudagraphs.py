"""`cuda-graphs`: a forward model's kernels captured once into a CUDA graph and replayed per call.

Follows PyTorch's CUDA-graphs recipe (docs: notes/cuda, "CUDA Graphs"): warm-up iterations on a
side stream, capture under `torch.cuda.graph` on static input buffers, and per call copy the
new inputs into those buffers, replay, and return clones of the static outputs (the next
replay overwrites them). A graph is valid for the shapes, dtypes and device it was captured
with; other inputs are refused with an error naming both, never silently run another way.
Decoders get CUDA graphs through `compile` mode=reduce-overhead on their decode step instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from agnitra.errors import WorkloadError, check
from agnitra.transforms.base import Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import ModelWrapper


def _signature(tensors) -> list[tuple[tuple[int, ...], torch.dtype]]:
    return [(tuple(t.shape), t.dtype) for t in tensors]


def _describe(signature) -> str:
    return ", ".join(f"{'x'.join(map(str, shape)) or 'scalar'} {str(dtype).replace('torch.', '')}" for shape, dtype in signature)


def check_same_signature(captured, given: tuple) -> None:
    """Raise unless `given` are tensors of the captured shapes and dtypes (a graph replays only those)."""
    if not all(isinstance(t, torch.Tensor) for t in given):
        raise WorkloadError("the CUDA graph takes tensors only; got " + ", ".join(type(t).__name__ for t in given))
    if _signature(given) != list(captured):
        raise WorkloadError(
            f"the CUDA graph was captured for inputs ({_describe(captured)}) and cannot replay ({_describe(_signature(given))}); "
            "optimize again with these shapes, or leave out cuda-graphs"
        )


class CudaGraphRunner(ModelWrapper):
    """Replays `inner(*inputs)` captured as a CUDA graph on static input buffers."""

    def __init__(self, inner: nn.Module, example_inputs: tuple, device: torch.device, warmup: int = 3) -> None:
        super().__init__(inner)
        self.static_inputs = tuple(t.detach().to(device).clone() for t in example_inputs)
        self.signature = _signature(self.static_inputs)
        self.graph = torch.cuda.CUDAGraph()
        outputs = self._capture(device, warmup)
        leaves, self.output_spec = tree_flatten(outputs)
        self.static_outputs = leaves

    def _capture(self, device: torch.device, warmup: int) -> Any:
        with torch.cuda.device(device), torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up: lazy init, cuBLAS workspaces, autotuning
                for _ in range(warmup):
                    self.inner(*self.static_inputs)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(self.graph):
                return self.inner(*self.static_inputs)

    def forward(self, *args, **kwargs):
        if kwargs:
            raise WorkloadError(f"the CUDA graph takes positional inputs only; got keyword arguments {', '.join(kwargs)}")
        check_same_signature(self.signature, args)
        for static, new in zip(self.static_inputs, args):
            if new.data_ptr() != static.data_ptr():
                static.copy_(new)
        self.graph.replay()
        return tree_unflatten([o.clone() if isinstance(o, torch.Tensor) else o for o in self.static_outputs], self.output_spec)


@register_transform
class CudaGraphs(Transform):
    name = "cuda-graphs"
    description = "the forward pass captured once as a CUDA graph and replayed (no per-kernel launch cost)"
    requires = "an NVIDIA GPU; a forward (non-decoder) workload with fixed input shapes"
    stage = "runtime"

    @dataclass
    class Params:
        warmup: int = 3

    def check(self, ctx: TransformContext, params) -> None:
        check(ctx.device.type == "cuda", f"CUDA graphs need a GPU; this run is on {ctx.device.type}")
        check(not ctx.decoder, "decoders get CUDA graphs through compile mode=reduce-overhead on their decode step")
        check(all(isinstance(t, torch.Tensor) for t in ctx.workload.example_inputs), "CUDA graphs capture tensor inputs only; the workload passes other values")
        check(params.warmup >= 1, "CUDA-graph capture needs at least one warm-up call")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        return CudaGraphRunner(model, ctx.workload.example_inputs, ctx.device, params.warmup)

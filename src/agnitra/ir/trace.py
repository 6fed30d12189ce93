"""A dispatch-level trace of one eager run, as an IR: the fallback when torch.export fails.

Every aten operator that runs becomes a node; forward hooks keep a stack of the modules being
executed so each node knows its owner; tensor identities give the edges (which node produced
each input); tensors derived from parameters through views count as weights.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from agnitra.ir.graph import GraphIR, IRNode, aten_kind
from agnitra.telemetry.opcount import cost_of


class _ModuleStack:
    """Forward pre/post hooks on every submodule: which module is running right now."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {m: n for n, m in model.named_modules()}
        self.stack: list[nn.Module] = []
        self.handles = []
        for module in self.names:
            if isinstance(module, torch.jit.ScriptModule):  # TorchScript takes no Python hooks: its ops go unattributed
                continue
            self.handles.append(module.register_forward_pre_hook(self._enter))
            self.handles.append(module.register_forward_hook(self._exit))

    def _enter(self, module, args):
        self.stack.append(module)

    def _exit(self, module, args, output):
        if self.stack and self.stack[-1] is module:
            self.stack.pop()

    def current(self) -> tuple[str, str]:
        if not self.stack:
            return "", ""
        module = self.stack[-1]
        return self.names[module], type(module).__name__

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class _Tracer(TorchDispatchMode):
    def __init__(self, modules: _ModuleStack, params: dict[int, str]) -> None:
        super().__init__()
        self.modules = modules
        self.producer: dict[int, str] = dict(params)  # id(tensor) -> node or parameter name
        self.weights: set[int] = set(params)  # ids of parameters and their views
        self.keep: list[torch.Tensor] = []  # keeps traced tensors alive so ids stay unique
        self.nodes: list[IRNode] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        weight_input = any(id(t) in self.weights for t in inputs)
        cost = cost_of(func, args, kwargs, out)
        module, module_type = self.modules.current()
        name = f"{cost.op.split('::')[-1]}_{len(self.nodes)}"
        self.nodes.append(
            IRNode(
                name=name, op=cost.op, kind=aten_kind(cost.op, weight_input, torch.Tag.pointwise in func.tags),
                module=module, module_type=module_type,
                inputs=[self.producer[id(t)] for t in inputs if id(t) in self.producer],
                input_shapes=[list(t.shape) for t in inputs], input_dtypes=[_dtype(t) for t in inputs],
                output_shapes=[list(t.shape) for t in outputs], output_dtypes=[_dtype(t) for t in outputs],
                weight_input=weight_input, flops=cost.flops, bytes_read=cost.bytes_read, bytes_written=cost.bytes_written,
            )
        )
        for t in outputs:
            self.producer[id(t)] = name
            self.keep.append(t)
            if func.is_view and weight_input:
                self.weights.add(id(t))
        return out


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def trace_dispatch(model: nn.Module, example_inputs: tuple, name: str) -> GraphIR:
    params = {id(t): n for n, t in list(model.named_parameters()) + list(model.named_buffers())}
    modules = _ModuleStack(model)
    tracer = _Tracer(modules, params)
    try:
        with torch.no_grad(), tracer:
            model(*example_inputs)
    finally:
        modules.remove()
    inputs = [{"name": f"input_{i}", "shape": list(t.shape), "dtype": _dtype(t)} for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)]
    state = list(model.parameters()) + list(model.buffers())
    return GraphIR(
        name=name, source="trace", nodes=tracer.nodes, inputs=inputs,
        params=sum(p.numel() for p in model.parameters()),
        param_bytes=sum(t.numel() * t.element_size() for t in state),
    )


@contextlib.contextmanager
def module_ranges(model: nn.Module, prefix: str = "agnitra.module::"):
    """Wrap every module's forward in a profiler range named after its qualified name."""
    names = {m: n for n, m in model.named_modules()}
    open_ranges: dict[int, list[Any]] = {}

    def enter(module, args):
        rf = torch.autograd.profiler.record_function(prefix + names[module])
        rf.__enter__()
        open_ranges.setdefault(id(module), []).append(rf)

    def leave(module, args, output):
        stack = open_ranges.get(id(module))
        if stack:
            stack.pop().__exit__(None, None, None)

    hooked = [m for m in names if not isinstance(m, torch.jit.ScriptModule)]  # TorchScript takes no Python hooks
    handles = [h for m in hooked for h in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave))]
    try:
        yield prefix
    finally:
        for h in handles:
            h.remove()

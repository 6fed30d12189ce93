"""Copies of a module that share no mutable Python state with it: the user's model stays as it was.

`independent_copy` makes new module objects all the way down (each with its own parameter,
buffer, child and hook dicts) and a new `nn.Parameter` object for every parameter, sharing the
parameter's storage: `copy.to(torch.bfloat16)`, `param.data = ...`, `copy.eval()` or a new hook
on the copy leave the original's tensors, dtypes, devices, modes and hooks as they were, while an
8B model is not duplicated. Buffers, which a forward may update in place (running statistics,
caches), are cloned when asked.

What the copy keeps from the original:
- one module used twice stays one module; one Parameter used by two modules (tied weights)
  stays one Parameter, and likewise buffers;
- parametrizations (`torch.nn.utils.parametrize`: weight_norm, spectral_norm): the copy is built
  without `copy.copy`, which parametrized modules refuse, and its parametrizations are copied as
  modules, their `original` tensors as parameters;
- hooks, including the hook-based `torch.nn.utils.weight_norm`; a hook that is a bound method of a
  module in the tree is rebound to that module's copy;
- `requires_grad`, training flags and devices, until the caller changes them on the copy.

TorchScript modules hold their state in C++ objects a Python copy would share: they are deep
copied (their tensors too, without requires_grad). An `fx.GraphModule` gets its own graph and its own class (recompiled on its graph), so
a pass that rewrites the copy's graph leaves the original's code alone.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import torch
from torch import nn

# nn.Module's own per-instance containers: _parameters, _buffers, _modules, the hook dicts, ...
MODULE_CONTAINERS = tuple(name for name, value in vars(nn.Module()).items() if isinstance(value, (dict, set)))


def independent_copy(model: nn.Module, *, clone_buffers: bool = True) -> nn.Module:
    """New modules and Parameter objects over the same parameter storage; buffers cloned or shared."""
    copier = _Copier(clone_buffers)
    new = copier.module(model)
    copier.rebind_hooks()
    return new


class _Copier:
    def __init__(self, clone_buffers: bool) -> None:
        self.clone_buffers = clone_buffers
        self.memo: dict[int, Any] = {}
        self.modules: list[nn.Module] = []

    def module(self, module: nn.Module) -> nn.Module:
        if id(module) in self.memo:  # a module used twice stays one module
            return self.memo[id(module)]
        if isinstance(module, torch.jit.ScriptModule):
            with torch.no_grad():  # the copied tensors as leaves, not clones tied to the user's by autograd
                new = copy.deepcopy(module)
            self.memo[id(module)] = new
            return new
        new = _blank(module)
        self.memo[id(module)] = new
        self.modules.append(new)
        state = dict(vars(module))
        for name in MODULE_CONTAINERS:
            if name in state:
                state[name] = copy.copy(state[name])
        state["_parameters"] = {k: self.parameter(p) for k, p in module._parameters.items()}
        state["_buffers"] = {k: self.buffer(b) for k, b in module._buffers.items()}
        state["_modules"] = {k: (self.module(m) if m is not None else None) for k, m in module._modules.items()}
        new.__dict__.update(state)
        if isinstance(module, torch.fx.GraphModule):
            new.graph = copy.deepcopy(module.graph)  # its own graph, compiled into its own class
        return new

    def parameter(self, param: nn.Parameter | None) -> nn.Parameter | None:
        if param is None:
            return None
        if id(param) not in self.memo:  # tied weights: one Parameter stays one Parameter
            self.memo[id(param)] = _new_parameter(param)
        return self.memo[id(param)]

    def buffer(self, buffer: torch.Tensor | None) -> torch.Tensor | None:
        if buffer is None or not self.clone_buffers:
            return buffer
        if id(buffer) not in self.memo:
            self.memo[id(buffer)] = buffer.clone()
        return self.memo[id(buffer)]

    def rebind_hooks(self) -> None:
        """Hooks that are methods of a module in the tree call that module's copy."""
        for module in self.modules:
            for name in MODULE_CONTAINERS:
                hooks = vars(module).get(name)
                if name.endswith("hooks") and isinstance(hooks, dict):
                    for key, hook in hooks.items():
                        hooks[key] = self._rebound(hook)

    def _rebound(self, hook: Any) -> Any:
        owner = getattr(hook, "__self__", None)
        if isinstance(hook, types.MethodType) and id(owner) in self.memo and isinstance(owner, nn.Module):
            return types.MethodType(hook.__func__, self.memo[id(owner)])
        return hook


def _blank(module: nn.Module) -> nn.Module:
    """An uninitialised instance of the module's class (GraphModule's __new__ gives it a class of its own)."""
    cls = type(module)
    try:
        return cls.__new__(cls)
    except TypeError:  # a __new__ that wants arguments
        return object.__new__(cls)


def _new_parameter(param: nn.Parameter) -> nn.Parameter:
    """Its own Parameter object over the same storage, with the same requires_grad and attributes."""
    if type(param) is nn.Parameter:
        new = nn.Parameter(param.detach(), requires_grad=param.requires_grad)
        new.__dict__.update(vars(param))
        return new
    return copy.copy(param)  # Parameter subclasses (lazy, quantised) copy themselves

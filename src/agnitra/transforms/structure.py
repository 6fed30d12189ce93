"""Targets found by structure, not by class name: what the model computes, not what it is called.

Class names and forward signatures move between transformers releases (and every family spells
its attention its own way: `q_proj`, `query`, `q_lin`, `q`, `c_attn`); what does not move is the
data flow. So:

- **Stackable projections** (`find_projection_groups`): one forward of the example inputs with a
  global forward pre-hook (nothing is registered on the user's modules) records which input tensor
  each `nn.Linear` (and transformers' GPT-2-style `Conv1D`, `x @ W + b`) receives. Layers that read
  the very same tensor object (q/k/v; gate/up; the key/value of cross-attention, which every
  decoder layer reads from the same encoder output), with one input size, dtype and device, form a
  group. Tensors are told apart by a weak reference, so detection holds no activation alive and a
  recycled `id()` is not mistaken for the same tensor. A layer called more than once per forward,
  or registered under two names, is left alone: its role is ambiguous.
- **Stacked projections** (`stack_group`): the group's weights as the rows of one `nn.Linear`
  (missing biases as zeros, Conv1D weights transposed) inside a `StackedProjection`; each member
  becomes a `ProjectionSlice` that asks it for its columns. The first member called with an input
  computes the stacked product once; the others get their slice of it. A member called with
  another input (or an input changed in place, eager mode) computes only its own rows, so the
  result never depends on the detection forward having been representative. The product is
  dropped once every member has taken its slice, and at the end of every forward of the model
  (a hook on the patcher's copy), so nothing is held between forwards. The state is a Python list
  TorchDynamo traces as a side effect: torch.compile (fullgraph) sees one matmul per group.
- **RMSNorms by behaviour** (`rms_norm_eps`): a leaf module with one 1-D `weight` and an epsilon
  attribute whose output on a probe input is x * rsqrt(mean(x^2) + eps) * weight.
- **Gated MLPs by behaviour** (`gated_mlp_parts`): a module with three Linear children, two of
  which read its input, whose output on a probe is down(silu(gate(x)) * up(x)).
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


def is_conv1d(module: nn.Module) -> bool:
    """transformers' GPT-2-style Conv1D: weight [in, out], y = x @ W + b."""
    cls = type(module)
    return (
        cls.__name__ == "Conv1D" and cls.__module__.startswith("transformers.")
        and isinstance(getattr(module, "weight", None), torch.Tensor) and module.weight.dim() == 2
        and getattr(module, "nf", None) == module.weight.shape[1]
    )


def is_projection(module: nn.Module) -> bool:
    """A floating-point nn.Linear (its own forward) or transformers Conv1D."""
    linear = isinstance(module, nn.Linear) and type(module).forward is nn.Linear.forward
    return (linear or is_conv1d(module)) and module.weight.is_floating_point()


def in_features(module: nn.Module) -> int:
    return module.weight.shape[0] if is_conv1d(module) else module.in_features


def out_features(module: nn.Module) -> int:
    return module.weight.shape[1] if is_conv1d(module) else module.out_features


# ---- detection -----------------------------------------------------------------------------------


@dataclass
class Detection:
    """What one forward of the example inputs showed: the groups (qualified names, call order) and
    why the other projections did not group (for the report)."""

    groups: list[tuple[str, ...]] = field(default_factory=list)
    seen: int = 0  # projections in the model
    called: int = 0  # of them, called in the forward
    repeated: list[str] = field(default_factory=list)  # called more than once, or under two names
    error: str = ""  # the forward failed

    def describe_groups(self) -> str:
        """e.g. '4 groups: 2 x q_proj|k_proj|v_proj, 2 x gate_proj|up_proj'."""
        shapes = Counter("|".join(name.rsplit(".", 1)[-1] for name in group) for group in self.groups)
        parts = ", ".join(f"{count} x {shape}" if count > 1 else shape for shape, count in shapes.items())
        return f"{len(self.groups)} group{'s' if len(self.groups) != 1 else ''} ({sum(map(len, self.groups))} layers): {parts}"

    def why_none(self) -> str:
        if self.error:
            return f"the example forward failed ({self.error})"
        if self.seen == 0:
            return "the model has no nn.Linear or Conv1D layer"
        if self.called == 0:
            return f"none of its {self.seen} nn.Linear/Conv1D layers ran in a forward of the example inputs"
        why = f"no two of the {self.called} nn.Linear/Conv1D layers that ran read the same input tensor with one input size and dtype"
        if self.repeated:
            why += f" ({len(self.repeated)} called more than once left alone)"
        return why + "; separate projections already stacked (GPT-2's c_attn) or each reading its own input have nothing to stack"


_DETECTIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def find_projection_groups(model: nn.Module, inputs: tuple) -> Detection:
    """The stackable projection groups of `model` on `inputs` (cached per model object).

    The forward runs on a copy (buffers cloned: a forward may update running statistics or a
    cache in place) under no_grad, with a process-wide forward pre-hook that only reads."""
    cached = _DETECTIONS.get(model)
    if cached is not None:
        return cached
    from agnitra.workloads.model_copy import independent_copy

    copy = independent_copy(model, clone_buffers=True)
    detection = _detect(copy, inputs)
    _DETECTIONS[model] = detection
    return detection


def _detect(model: nn.Module, inputs: tuple) -> Detection:
    names: dict[int, list[str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if name and is_projection(module):
            names.setdefault(id(module), []).append(name)
    detection = Detection(seen=len(names))
    if not names:
        return detection
    calls: dict[int, list[int]] = {}  # module id -> input keys, in call order
    refs: dict[int, tuple[weakref.ref, int]] = {}  # tensor id -> (weak reference, key)
    order: list[int] = []

    def key_of(x: torch.Tensor) -> int:
        ref = refs.get(id(x))
        if ref is None or ref[0]() is not x:  # new tensor (or a recycled id)
            ref = refs[id(x)] = (weakref.ref(x), len(refs) + len(order) + 1)
        return ref[1]

    def record(module: nn.Module, args: tuple, kwargs: dict | None = None) -> None:
        if id(module) not in names:
            return
        x = args[0] if args else (kwargs or {}).get("input")
        if isinstance(x, torch.Tensor):
            if id(module) not in calls:
                order.append(id(module))
            calls.setdefault(id(module), []).append(key_of(x))

    handle = nn.modules.module.register_module_forward_pre_hook(record)
    try:
        with torch.no_grad():
            model.eval()(*inputs)
    except Exception as exc:  # noqa: BLE001 - any failure: nothing detected, the reason reported
        detection.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        return detection
    finally:
        handle.remove()
    modules = {id(m): m for m in model.modules()}
    detection.called = len(calls)
    by_input: dict[tuple, list[str]] = {}
    for mid in order:
        keys, module = calls[mid], modules[mid]
        if len(keys) > 1 or len(names[mid]) > 1:
            detection.repeated.append(names[mid][0])
            continue
        w = module.weight
        by_input.setdefault((keys[0], in_features(module), w.dtype, w.device), []).append(names[mid][0])
    detection.groups = [tuple(group) for group in by_input.values() if len(group) > 1]
    return detection


# ---- the rewrite ---------------------------------------------------------------------------------


def _rows(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight [out, in] and bias [out] (zeros where there is none) of a projection."""
    weight = module.weight.detach()
    weight = weight.t() if is_conv1d(module) else weight
    bias = module.bias.detach() if getattr(module, "bias", None) is not None else torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
    return weight, bias


class StackedProjection(nn.Module):
    """One nn.Linear over the stacked rows of a group; `take(i, x)` hands member i its columns.

    The state is one entry [input, product, input version, members served (bit mask)] in a plain
    list, read once per call and replaced whole: TorchDynamo traces its mutation (one matmul per
    input in the graph), and a thread that finds another thread's entry recomputes rather than
    read a product of another input."""

    def __init__(self, members: list[nn.Module]) -> None:
        super().__init__()
        rows = [_rows(m) for m in members]
        weight = torch.cat([w for w, _ in rows])
        has_bias = any(getattr(m, "bias", None) is not None for m in members)
        self.linear = nn.Linear(weight.shape[1], weight.shape[0], bias=has_bias, device="meta")
        self.linear.weight = nn.Parameter(weight.contiguous(), requires_grad=False)
        if has_bias:
            self.linear.bias = nn.Parameter(torch.cat([b for _, b in rows]), requires_grad=False)
        self.bounds = []
        start = 0
        for m in members:
            self.bounds.append((start, start + out_features(m)))
            start += out_features(m)
        self.all_served = (1 << len(members)) - 1
        self._state: list = [None]

    def take(self, index: int, x: torch.Tensor) -> torch.Tensor:
        start, stop = self.bounds[index]
        compiling = torch.compiler.is_compiling()
        entry = self._state[0]
        same = entry is not None and entry[0] is x and (compiling or entry[2] == x._version)  # eager: not changed in place since
        if same and entry[3] >> index & 1:  # a member asking twice for one input: the product stays for the others
            return self.linear(x)[..., start:stop]
        if not same:
            entry = [x, self.linear(x), 0 if compiling else x._version, 0]
            self._state[0] = entry
        entry[3] |= 1 << index
        if entry[3] == self.all_served:
            self.release()
        return entry[1][..., start:stop]

    def holds(self) -> bool:
        """Whether a product is kept (between the members' calls of one forward only)."""
        return self._state[0] is not None

    def release(self) -> None:
        self._state[0] = None

    def extra_repr(self) -> str:
        return f"members={len(self.bounds)}, out_features={[b - a for a, b in self.bounds]}"


class ProjectionSlice(nn.Module):
    """A member of a stacked group: its columns of the group's product."""

    def __init__(self, stack: StackedProjection, index: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.stack = stack
        self.index = index
        self.in_features, self.out_features = in_features, out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stack.take(self.index, x)

    def extra_repr(self) -> str:
        return f"member {self.index}, in_features={self.in_features}, out_features={self.out_features}"


def stackable_members(members: list[nn.Module]) -> bool:
    first = members[0]
    return all(
        is_projection(m) and in_features(m) == in_features(first) and m.weight.dtype == first.weight.dtype
        and m.weight.device == first.weight.device for m in members
    )


class _ReleaseStacks:
    """The forward hook that drops every group's product at the end of a forward (picklable)."""

    def __init__(self, stacks: list[StackedProjection]) -> None:
        self.stacks = stacks

    def __call__(self, module, args, output=None) -> None:
        for stack in self.stacks:
            stack.release()


def stack_groups(model: nn.Module, groups: list[tuple[str, ...]]) -> int:
    """Replace each group of `model` (the patcher's copy) whose members are still stackable
    projections at those names by slices of one `StackedProjection`; returns how many groups.

    A group whose names an earlier rewrite moved (a class-specific stacking, a quantiser) is left."""
    stacks = []
    for group in groups:
        members = [_get(model, name) for name in group]
        if any(m is None for m in members) or not stackable_members(members):
            continue
        stack = StackedProjection(members)
        for index, (name, member) in enumerate(zip(group, members)):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, ProjectionSlice(stack, index, in_features(member), out_features(member)))
        stacks.append(stack)
    if stacks:  # nothing held between forwards, even where a member was not called or a forward failed
        model.register_forward_hook(_ReleaseStacks(stacks), always_call=True)
    return len(stacks)


def _get(model: nn.Module, name: str) -> nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


# ---- norms and gated MLPs by behaviour -----------------------------------------------------------

_EPS_NAMES = ("eps", "variance_epsilon", "epsilon")


def _probe(dim: int, like: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, dim, generator=g, device="cpu") + 0.5).to(device=like.device, dtype=like.dtype)


def _close(a, b, dtype: torch.dtype) -> bool:
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=tol, atol=tol)


def rms_norm_eps(module: nn.Module) -> float | None:
    """The epsilon of a module that computes RMSNorm (x * rsqrt(mean(x^2) + eps) * weight over the
    last dimension, in float32 then cast back), judged on a probe input; else None."""
    if list(module.children()) or isinstance(module, (nn.LayerNorm, nn.GroupNorm)):
        return None
    params = dict(module.named_parameters())
    weight = params.get("weight")
    eps = next((getattr(module, n) for n in _EPS_NAMES if isinstance(getattr(module, n, None), float)), None)
    if len(params) != 1 or weight is None or weight.dim() != 1 or not weight.is_floating_point() or eps is None or weight.is_meta:
        return None
    x = _probe(weight.shape[0], weight)
    try:
        with torch.no_grad():
            y = module(x)
    except Exception:  # noqa: BLE001 - not a norm of one tensor
        return None
    xf = x.float()
    ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight
    return eps if _close(y, ref, x.dtype) else None


def gated_mlp_parts(module: nn.Module) -> tuple[nn.Module, nn.Module, nn.Module] | None:
    """(gate, up, down) of a module computing down(silu(gate(x)) * up(x)) with three bias-free
    Linear-like children (nn.Linear, or a quantised one with in_features / out_features) and no
    other parameters, judged on a probe input; else None."""
    children = list(module.children())
    linears = [c for c in children if isinstance(getattr(c, "in_features", None), int) and isinstance(getattr(c, "out_features", None), int)]
    others = [c for c in children if not any(c is li for li in linears)]
    if len(linears) != 3 or any(getattr(c, "bias", None) is not None for c in linears) or any(True for c in others for _ in c.parameters()):
        return None
    if any(True for _ in module.parameters(recurse=False)):
        return None
    like = next((t for c in linears for t in [*c.parameters(), *c.buffers()] if t.is_floating_point()), None)
    if like is None or like.is_meta:
        return None
    for down in linears:
        gate, up = (c for c in linears if c is not down)
        if not (gate.in_features == up.in_features == down.out_features and gate.out_features == up.out_features == down.in_features):
            continue
        x = _probe(gate.in_features, like)
        try:
            with torch.no_grad():
                y = module(x)
                for g, u in ((gate, up), (up, gate)):
                    if _close(y, down(F.silu(g(x)) * u(x)), x.dtype):
                        return g, u, down
        except Exception:  # noqa: BLE001 - a module of another call signature
            return None
    return None

"""FLOPs and bytes of every aten operator a model runs, counted by a dispatch mode.

FLOPs count 2 per multiply-add. Matrix products, convolutions and attention use PyTorch's own
formulas (`torch.utils.flop_counter`), plus the CPU flash-attention kernel it does not list;
pointwise operators count one FLOP per output element, reductions one per input element,
softmax five and layer norm eight per element: estimates, small next to the matrix work.

Bytes are what an operator must read and write once: its tensor inputs (broadcast dimensions
counted once) and its outputs. Views move nothing. Indexed writes and gathers (KV-cache updates,
embedding lookups) count only the rows they touch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


@dataclass
class OpCost:
    op: str  # "aten::mm"
    shapes: tuple[tuple[int, ...], ...]  # direct tensor arguments, empty shapes dropped
    dtypes: tuple[str, ...]
    flops: float
    bytes_read: float
    bytes_written: float

    @property
    def key(self) -> tuple:
        return (self.op, self.shapes)

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


def _flop_counter():
    """torch's FLOP formulas, imported when first counted: the module imports Triton (0.6 s)."""
    from torch.utils import flop_counter

    return flop_counter


def _sdpa_flops(query, key, value, *args, out_val=None, **kwargs) -> int:
    return _flop_counter().sdpa_flop_count(query.shape, key.shape, value.shape)


def _linear_flops(x, weight, *args, out_val=None, **kwargs) -> int:
    # x [..., K] @ weight[N, K]^T: 2 * rows * K * N
    return 2 * x.numel() * weight.shape[0]


def _matmul_flops(a, b, *args, out_val=None, **kwargs) -> int:
    # general matmul: every output element is a K-long dot product
    out = out_val if isinstance(out_val, torch.Tensor) else torch.empty(0)
    return 2 * out.numel() * a.shape[-1] if a.dim() > 0 else 0


def _conv_flops(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *args, out_val=None, **kwargs) -> int:
    return _flop_counter().conv_flop_count(x.shape, weight.shape, out_val.shape, transposed=False)


# Composite operators that torch.export keeps in its graph (the dispatch level never sees them)
_COMPOSITE_FLOPS: dict[str, Callable] = {
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_flops,
    "_scaled_dot_product_fused_attention_overrideable": _sdpa_flops,
    "scaled_dot_product_attention": _sdpa_flops,
    "linear": _linear_flops,
    "matmul": _matmul_flops,
    "conv1d": _conv_flops,
    "conv2d": _conv_flops,
    "conv3d": _conv_flops,
}


def _matmul_flop_fn(packet) -> Callable | None:
    registry = _flop_counter().flop_registry
    if packet in registry:
        return registry[packet]
    return _COMPOSITE_FLOPS.get(packet._qualified_op_name.split("::")[-1])


_PER_ELEMENT = {
    "_softmax": 5, "_log_softmax": 5, "softmax": 5, "log_softmax": 5, "_safe_softmax": 5,
    "native_layer_norm": 8, "layer_norm": 8, "native_group_norm": 8, "group_norm": 8, "rms_norm": 4,
    "native_batch_norm": 4, "_native_batch_norm_legit_no_training": 4, "batch_norm": 4,
    "gelu": 8, "silu": 4,
}
# windowed reductions: one FLOP per input element read
_POOLS = {"max_pool2d", "max_pool1d", "avg_pool2d", "avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool1d", "adaptive_max_pool2d", "max_pool2d_with_indices", "_adaptive_avg_pool2d"}
_GATHERS = {"embedding", "index_select", "index", "gather"}
_SCATTERS = {"index_put_", "_index_put_impl_", "index_copy_", "scatter_", "copy_", "index_put"}
_NO_DATA = {"empty", "empty_strided", "empty_like", "resolve_conj", "resolve_neg", "lift_fresh", "detach", "_local_scalar_dense", "_unsafe_view", "alias"}
_COPIES = {"clone", "copy_", "_to_copy", "contiguous", "fill_", "zero_", "zeros_like", "ones_like", "full_like"}  # move data, no arithmetic


def unique_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor occupies once: broadcast (stride-0) dimensions count once."""
    if t.device.type == "meta" or t.numel() == 0:
        return t.numel() * t.element_size()
    elements = math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0)
    return elements * t.element_size()


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in torch.utils._pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _schema_ordered(func, args, kwargs) -> list:
    """Arguments in schema order, keyword-only ones included: the order the profiler records."""
    ordered = list(args)
    for arg in func._schema.arguments[len(args):]:
        if arg.name in kwargs:
            ordered.append(kwargs[arg.name])
    return ordered


def _direct_shapes(arguments) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(a.shape) for a in arguments if isinstance(a, torch.Tensor) and a.dim() > 0)


def _bytes(func, name: str, args, kwargs, out) -> tuple[float, float]:
    if func.is_view or name in _NO_DATA:
        return 0.0, 0.0
    outs = _tensors(out)
    if name in _GATHERS:
        written = sum(unique_bytes(o) for o in outs)
        index_bytes = sum(unique_bytes(a) for a in _tensors(args[1:]))
        return float(written + index_bytes), float(written)
    if name in _SCATTERS:
        sources = _tensors(args[1:])  # values, indices: the destination is only partly touched
        moved = sum(unique_bytes(a) for a in sources)
        values = unique_bytes(sources[-1]) if sources else 0
        return float(moved), float(values)
    read = sum(unique_bytes(a) for a in _tensors((args, kwargs)))
    written = sum(unique_bytes(o) for o in outs)
    return float(read), float(written)


def _flops(func, name: str, args, kwargs, out) -> float:
    fn = _matmul_flop_fn(func._overloadpacket)
    if fn is not None:
        return float(fn(*args, **kwargs, out_val=out))
    outs = _tensors(out)
    if name in _COPIES:
        return 0.0
    if name in _PER_ELEMENT:
        return float(_PER_ELEMENT[name] * sum(o.numel() for o in outs[:1]))
    if torch.Tag.pointwise in func.tags:
        return float(sum(o.numel() for o in outs[:1]))
    if torch.Tag.reduction in func.tags or name in _POOLS:
        return float(sum(a.numel() for a in _tensors(args[:1])))
    return 0.0


def cost_of(func, args, kwargs, out) -> OpCost:
    name = func._overloadpacket._qualified_op_name.split("::")[-1]
    read, written = _bytes(func, name, args, kwargs, out)
    return OpCost(
        op=f"aten::{name}",
        shapes=_direct_shapes(_schema_ordered(func, args, kwargs)),
        dtypes=tuple(str(a.dtype).replace("torch.", "") for a in args if isinstance(a, torch.Tensor)),
        flops=_flops(func, name, args, kwargs, out),
        bytes_read=read,
        bytes_written=written,
    )


class OpCounter(TorchDispatchMode):
    """Records an OpCost for every aten operator run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[OpCost] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.records.append(cost_of(func, args, kwargs, out))
        return out


def count_ops(fn: Callable, *inputs) -> list[OpCost]:
    """Run `fn(*inputs)` once without gradients and return the cost of each operator it ran."""
    counter = OpCounter()
    with torch.no_grad(), counter:
        fn(*inputs)
    return counter.records


@dataclass
class OpTotals:
    calls: int
    flops: float
    bytes: float


def aggregate(records: list[OpCost]) -> dict[tuple, OpTotals]:
    """Sum records by (op, shapes)."""
    totals: dict[tuple, OpTotals] = defaultdict(lambda: OpTotals(0, 0.0, 0.0))
    for r in records:
        t = totals[r.key]
        t.calls += 1
        t.flops += r.flops
        t.bytes += r.bytes
    return dict(totals)

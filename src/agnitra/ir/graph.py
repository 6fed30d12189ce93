"""Agnitra's intermediate representation: an operator graph annotated with cost and time.

Every node keeps the qualified name of the module that owns it, so transforms can patch modules
by name and time can be attributed to modules. `GraphIR.to_dict()`/`from_dict()` give the
schema-versioned JSON (`agnitra.ir/1`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

IR_SCHEMA = "agnitra.ir/1"

# Operator kinds: the coarse classes the hotspot view, the op mix and the signature use.
KINDS = (
    "matmul",  # a weight times activations: linear, addmm, mm with a parameter, Gemm
    "conv",
    "attention",  # activation x activation products: SDPA, QK^T / PV matmuls, fused Attention
    "norm",
    "softmax",
    "embedding",
    "elementwise",
    "reduction",
    "data_movement",  # views, copies, concatenation, indexing, casts
    "other",
)

_ATEN_KINDS = {
    "conv": {"convolution", "conv1d", "conv2d", "conv3d", "_convolution", "cudnn_convolution", "conv_transpose2d", "_slow_conv2d_forward"},
    "attention": {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable", "flex_attention"},
    "matmul_like": {"linear", "addmm", "mm", "bmm", "baddbmm", "matmul", "_scaled_mm", "einsum", "addmv", "mv", "dot"},
    "norm": {"layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "group_norm", "native_group_norm", "rms_norm", "_fused_rms_norm", "instance_norm"},
    "softmax": {"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"},
    "embedding": {"embedding", "embedding_bag"},
    "reduction": {"max_pool2d", "max_pool1d", "avg_pool2d", "avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool1d", "adaptive_max_pool2d", "max_pool2d_with_indices", "_adaptive_avg_pool2d", "sum", "mean", "amax", "amin", "max", "min", "var", "var_mean", "std", "prod", "argmax", "argmin", "norm", "linalg_vector_norm", "logsumexp", "cumsum"},
    "data_movement": {"view", "reshape", "_unsafe_view", "permute", "transpose", "t", "expand", "contiguous", "clone", "copy_", "_to_copy", "to", "cat", "stack", "slice", "select", "index", "index_select", "index_put", "index_put_", "unsqueeze", "squeeze", "flatten", "unflatten", "split", "split_with_sizes", "chunk", "narrow", "gather", "scatter", "repeat", "repeat_interleave", "type_as", "alias", "detach", "lift_fresh_copy", "zeros", "ones", "full", "empty", "arange", "zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "_assert_tensor_metadata", "masked_fill", "where", "tril", "triu", "pad", "constant_pad_nd", "roll", "flip", "unbind", "movedim", "as_strided", "view_as", "expand_as", "slice_scatter", "select_scatter", "fill_", "zero_", "scalar_tensor"},
}


def aten_kind(op_name: str, weight_input: bool, pointwise: bool = False) -> str:
    """Kind of an aten operator ('aten::addmm'); products with a weight are matmul, else attention."""
    name = op_name.split("::")[-1]
    if name in _ATEN_KINDS["matmul_like"]:
        return "matmul" if weight_input else "attention"
    for kind in ("conv", "attention", "norm", "softmax", "embedding", "reduction", "data_movement"):
        if name in _ATEN_KINDS[kind]:
            return kind
    if pointwise:
        return "elementwise"
    return "elementwise" if name.rstrip("_") in _ELEMENTWISE else "other"


_ELEMENTWISE = {
    "add", "sub", "mul", "div", "neg", "pow", "rsqrt", "sqrt", "exp", "log", "tanh", "sigmoid", "relu", "gelu", "silu",
    "erf", "abs", "clamp", "minimum", "maximum", "reciprocal", "sin", "cos", "hardtanh", "leaky_relu", "softplus",
    "mish", "hardswish", "hardsigmoid", "elu", "rsub", "eq", "ne", "lt", "gt", "le", "ge", "logical_not", "bitwise_not",
    "floor_divide", "remainder", "square", "__and__", "__or__", "logical_and", "logical_or", "bitwise_and", "bitwise_or", "diff", "dropout", "native_dropout", "addcmul", "addcdiv", "lerp", "exp2", "log1p",
    "expm1", "sign", "round", "floor", "ceil", "trunc", "softshrink", "glu", "threshold",
}


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


@dataclass
class IRNode:
    name: str
    op: str  # "aten::linear", "onnx::MatMul"
    kind: str  # one of KINDS
    module: str  # qualified name of the innermost owning module ("" = the root)
    module_type: str = ""
    inputs: list[str] = field(default_factory=list)  # names of producer nodes / graph inputs / params
    input_shapes: list[list[int]] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    weight_input: bool = False  # one input is a parameter or buffer (an initializer in ONNX)
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    bound: str = ""  # memory | compute, against the device's measured ceilings
    time_us: float | None = None  # measured, per call of the model
    share: float | None = None  # of the measured total

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes else None


@dataclass
class GraphBreak:
    reason: str
    location: str  # file:line of the user code, where known


@dataclass
class GraphIR:
    name: str
    source: str  # export | dynamo | onnx
    nodes: list[IRNode]
    inputs: list[dict[str, Any]] = field(default_factory=list)  # name, shape, dtype
    params: int = 0
    param_bytes: int = 0
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)  # how node times were measured; totals
    device: str = ""
    schema: str = IR_SCHEMA

    @property
    def total_flops(self) -> float:
        return sum(n.flops for n in self.nodes)

    @property
    def total_bytes(self) -> float:
        return sum(n.bytes for n in self.nodes)

    def by_name(self) -> dict[str, IRNode]:
        return {n.name: n for n in self.nodes}

    def edges(self) -> list[tuple[str, str]]:
        """Producer -> consumer pairs between operator nodes (inputs and params left out)."""
        names = {n.name for n in self.nodes}
        return [(src, n.name) for n in self.nodes for src in n.inputs if src in names]

    def op_mix(self) -> dict[str, dict[str, float]]:
        """Per kind: node count and share of FLOPs."""
        total = self.total_flops or 1.0
        mix: dict[str, dict[str, float]] = {}
        for n in self.nodes:
            entry = mix.setdefault(n.kind, {"count": 0, "flops_share": 0.0})
            entry["count"] += 1
            entry["flops_share"] += n.flops / total
        order = {kind: i for i, kind in enumerate(KINDS)}
        return dict(sorted(mix.items(), key=lambda kv: order.get(kv[0], len(order))))

    def to_dict(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["totals"] = {"flops": self.total_flops, "bytes": self.total_bytes, "nodes": len(self.nodes)}
        doc["op_mix"] = self.op_mix()
        return _finite(doc)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "GraphIR":
        if doc.get("schema") != IR_SCHEMA:
            raise ValueError(f"not an {IR_SCHEMA} document (schema {doc.get('schema')!r})")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in doc.items() if k in known}
        values["nodes"] = [IRNode(**n) for n in doc["nodes"]]
        values["graph_breaks"] = [GraphBreak(**b) for b in doc.get("graph_breaks", [])]
        return cls(**values)

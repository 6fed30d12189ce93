"""ONNX operators as the IR sees them: each op type's kind and its cost in FLOPs and bytes, from
its resolved input and output tensors (`NodeView`). `ir.onnx_import` walks the graph and calls
`onnx_kind`, `node_flops` and `node_bytes` for each node.

Cost conventions (those of `agnitra.telemetry.opcount`): 2 FLOPs per multiply-add; matrix
products, convolutions and attention exact, without their bias epilogue (as aten::addmm);
pointwise ops 1 FLOP per output element, Gelu 8; reductions and pools 1 per input element;
Softmax 5, RMS and batch norms 4, other norms 8 per element. Fused ONNX
Runtime ops count the work of the ops they replace, so fusion does not change the totals:
SkipLayerNormalization = norm (8) + the residual add (1) + the bias add when it has one (1);
BiasGelu = gelu (8) + bias (1); EmbedLayerNormalization = the lookups (0) + their adds + norm (8).
com.microsoft Attention carries the Q, K and V projection weights: its FLOPs are the QKV
projection 2*B*S*hidden_in*(q+k+v hidden) plus the two products QK^T and PV,
4*B*heads*S*S_kv*head_dim; its scale, mask and softmax are not counted (as SDPA in PyTorch).
Bytes are each distinct input read once (initializers included) plus the outputs written; view
ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity, inference Dropout) and Constant move 0
bytes; gathers read only the rows they return; Shape reads no data.

Integer products (MatMulInteger, QAttention) count their multiply-adds as FLOPs like float ones.

Kinds: a product (MatMul, Gemm, MatMulInteger, ...) is "matmul" when an operand is a weight, else
"attention"; fused attention ops are "attention"; EmbedLayerNormalization is "embedding" (it is
the model's embedding layer: three table lookups whose row reads dominate its traffic, plus the
norm that follows them; its unfused counterpart is three embedding nodes, an add and a norm).
A fused Attention is one node of kind "attention" whose FLOPs include its QKV projection, so the
op mix of a fused graph moves that work from "matmul" to "attention" (`onnx_import.weight_matmul_count`
counts weight products the same way in both forms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from onnx import TensorProto

DEFAULT_DOMAINS = ("", "ai.onnx")

# TensorProto element type -> (torch-style dtype name, bytes per element)
_DTYPES: dict[int, tuple[str, float]] = {
    TensorProto.FLOAT: ("float32", 4),
    TensorProto.UINT8: ("uint8", 1),
    TensorProto.INT8: ("int8", 1),
    TensorProto.UINT16: ("uint16", 2),
    TensorProto.INT16: ("int16", 2),
    TensorProto.INT32: ("int32", 4),
    TensorProto.INT64: ("int64", 8),
    TensorProto.STRING: ("string", 0),
    TensorProto.BOOL: ("bool", 1),
    TensorProto.FLOAT16: ("float16", 2),
    TensorProto.DOUBLE: ("float64", 8),
    TensorProto.UINT32: ("uint32", 4),
    TensorProto.UINT64: ("uint64", 8),
    TensorProto.COMPLEX64: ("complex64", 8),
    TensorProto.COMPLEX128: ("complex128", 16),
    TensorProto.BFLOAT16: ("bfloat16", 2),
    17: ("float8_e4m3fn", 1),
    18: ("float8_e4m3fnuz", 1),
    19: ("float8_e5m2", 1),
    20: ("float8_e5m2fnuz", 1),
    21: ("uint4", 0.5),
    22: ("int4", 0.5),
    23: ("float4_e2m1", 0.5),
}

# ---------------------------------------------------------------------------------------------
# Operator classes


# products: op type -> positions of the two matrix operands (a weight there makes it "matmul")
_PRODUCTS: dict[str, tuple[int, ...]] = {
    "MatMul": (0, 1), "Gemm": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3), "FusedMatMul": (0, 1),
    "MatMulNBits": (0, 1), "MatMulBnb4": (0, 1), "DynamicQuantizeMatMul": (0, 1), "MatMulIntegerToFloat": (0, 1),
    "QGemm": (0, 3), "FusedGemm": (0, 1), "TransposeMatMul": (0, 1), "Einsum": (),  # Einsum: every input
}
_ATTENTION = {"Attention", "QAttention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
              "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention", "DecoderMaskedSelfAttention",
              "SparseAttention", "LongformerAttention"}
_CONV = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv", "NhwcFusedConv", "DeformConv"}
# norms: FLOPs per element (opcount: layer/group norm 8, RMS norm 4, batch norm 4)
_NORMS = {"LayerNormalization": 8, "SimplifiedLayerNormalization": 4, "RMSNormalization": 4,
          "InstanceNormalization": 8, "GroupNormalization": 8, "GroupNorm": 8, "SkipGroupNorm": 8,
          "MeanVarianceNormalization": 8, "LpNormalization": 8, "BatchNormalization": 4,
          "SkipLayerNormalization": 8, "SkipSimplifiedLayerNormalization": 4}
_SKIP_NORMS = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "SkipGroupNorm"}
_SOFTMAX = {"Softmax", "LogSoftmax"}
_EMBEDDING_FUSED = {"EmbedLayerNormalization", "QEmbedLayerNormalization"}
_GATHERS = {"Gather", "GatherElements", "GatherND", "GatherBlockQuantized"}
_SCATTERS = {"ScatterND", "ScatterElements", "Scatter"}
_REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum",
               "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "TopK"}
_POOLS = {"MaxPool", "AveragePool", "LpPool", "MaxRoiPool", "RoiAlign"}
# elementwise ops costing more than 1 FLOP per output element (opcount: gelu 8, silu 4)
_ELEMENTWISE_FLOPS = {"Gelu": 8, "FastGelu": 8, "BiasGelu": 9, "QuickGelu": 4, "BiasFastGelu": 9}
_ELEMENTWISE = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Neg", "Abs", "Reciprocal", "Sqrt", "Exp", "Log", "Erf", "Tanh",
    "Sigmoid", "HardSigmoid", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Softplus", "Softsign",
    "Mish", "HardSwish", "Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasFastGelu", "Clip", "Floor", "Ceil",
    "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    "Max", "Min", "Mean", "Sum", "Where", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not",
    "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "IsNaN", "IsInf",
    "ThresholdedRelu", "Shrink", "BiasAdd", "BiasSplitGelu", "QuantizeLinear", "DequantizeLinear",
    "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "Affine",
    "ScaledTanh", "ParametricSoftplus", "RotaryEmbedding",
}
_VIEWS = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"}  # no data moved
_DATA_MOVEMENT = _VIEWS | _GATHERS | _SCATTERS | {
    "Transpose", "Concat", "Slice", "Split", "Cast", "CastLike", "Expand", "Shape", "Size", "Constant",
    "ConstantOfShape", "Tile", "Range", "Pad", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "Trilu",
    "Compress", "NonZero", "OneHot", "EyeLike", "ReverseSequence", "SplitToSequence", "ConcatFromSequence",
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceLength",
    "Optional", "OptionalGetElement", "OptionalHasElement", "CenterCropPad", "Col2Im", "Unique",
}
_NO_READ = {"Shape", "Size", "Constant", "ConstantOfShape", "EyeLike", "Range"}  # read no tensor data
# ops whose output is the weight they read, seen another way: a weight through them stays a weight
WEIGHT_ALIASES = {"Identity", "Transpose", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
                   "DequantizeLinear", "Dropout"}
CONTROL_FLOW = {"If", "Loop", "Scan"}


def onnx_kind(op_type: str, inputs_weight: Callable[[tuple[int, ...]], bool]) -> str:
    """Kind of an ONNX operator; `inputs_weight(positions)` says whether an input there is a weight."""
    if op_type in _PRODUCTS:
        return "matmul" if inputs_weight(_PRODUCTS[op_type]) else "attention"
    if op_type in _ATTENTION:
        return "attention"
    if op_type in _CONV:
        return "conv"
    if op_type in _EMBEDDING_FUSED:
        return "embedding"
    if op_type in _NORMS:
        return "norm"
    if op_type in _SOFTMAX:
        return "softmax"
    if op_type in ("Gather", "GatherBlockQuantized"):
        return "embedding" if inputs_weight((0,)) else "data_movement"
    if op_type in _ELEMENTWISE:
        return "elementwise"
    if op_type in _REDUCTIONS or op_type in _POOLS:
        return "reduction"
    if op_type in _DATA_MOVEMENT:
        return "data_movement"
    return "other"


# ---------------------------------------------------------------------------------------------
# Values: shapes and dtypes


@dataclass
class Value:
    name: str
    shape: list[int] | None  # None: unknown (or not concrete)
    dtype: str
    itemsize: float
    weight: bool = False  # an initializer, or an alias of one

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape is not None else 0

    @property
    def nbytes(self) -> float:
        return self.numel * self.itemsize


def dtype_of(elem_type: int) -> tuple[str, float]:
    return _DTYPES.get(elem_type, (f"onnx_type_{elem_type}", 0))


# ---------------------------------------------------------------------------------------------
# Costs


@dataclass
class NodeView:
    """One ONNX node with its tensors resolved; positions keep omitted optional tensors as None."""

    op_type: str
    domain: str
    attrs: dict[str, Any]
    ins: list[Value | None]
    outs: list[Value | None]

    def shape_in(self, i: int) -> list[int] | None:
        return self.ins[i].shape if i < len(self.ins) and self.ins[i] is not None else None

    def has_in(self, i: int) -> bool:
        return i < len(self.ins) and self.ins[i] is not None

    @property
    def out_numel(self) -> int:
        return self.outs[0].numel if self.outs and self.outs[0] is not None else 0


def _distinct(values: list[Value | None]) -> list[Value]:
    seen, out = set(), []
    for v in values:
        if v is not None and v.name not in seen:
            seen.add(v.name)
            out.append(v)
    return out


def _default_bytes(v: NodeView) -> tuple[float, float]:
    read = 0.0 if v.op_type in _NO_READ else sum(t.nbytes for t in _distinct(v.ins))
    return read, sum(t.nbytes for t in _distinct(v.outs))


def node_bytes(v: NodeView) -> tuple[float, float]:
    if v.op_type in _VIEWS or v.op_type == "Constant":
        return 0.0, 0.0
    written = sum(t.nbytes for t in _distinct(v.outs))
    if v.op_type in _GATHERS:  # the rows returned and the indices, not the whole table
        indices = v.ins[1].nbytes if v.has_in(1) else 0.0
        return written + indices, written
    if v.op_type in _SCATTERS:  # indices and updates; the destination is only partly touched
        sources = _distinct(v.ins[1:])
        return sum(t.nbytes for t in sources), (sources[-1].nbytes if sources else 0.0)
    if v.op_type in _EMBEDDING_FUSED:
        return _embed_layer_norm_read(v), written
    return _default_bytes(v)


_EMBED_TABLES = (2, 3, 4)  # word, position, segment embedding tables of (Q)EmbedLayerNormalization


def _embed_layer_norm_read(v: NodeView) -> float:
    """The rows gathered from each table ([B, S] rows of H: one output's worth of elements each, at
    the table's element size), and every other input whole: ids, gamma, beta, mask, scales."""
    rows = sum(v.out_numel * v.ins[i].itemsize for i in _EMBED_TABLES if v.has_in(i))
    others = [t for i, t in enumerate(v.ins) if i not in _EMBED_TABLES]
    return rows + sum(t.nbytes for t in _distinct(others))


def _product_flops(v: NodeView) -> float:
    """2 * prod(output) * K: batch broadcast is in the output's shape."""
    a = v.shape_in(0)
    if not a:
        return 0.0
    if v.op_type in ("Gemm", "QGemm", "FusedGemm"):
        k = a[0] if v.attrs.get("transA", 0) else a[-1]
    elif v.op_type in ("FusedMatMul", "TransposeMatMul") and v.attrs.get("transA", 0) and len(a) >= 2:
        k = a[-2]
    elif v.op_type in ("MatMulNBits", "MatMulBnb4") and "K" in v.attrs:
        k = int(v.attrs["K"])
    else:
        k = a[-1]
    return 2.0 * v.out_numel * k


def _einsum_flops(v: NodeView) -> float:
    """2 * prod(output) * prod(contracted dims); a pure product without contraction: prod(output)."""
    equation = str(v.attrs.get("equation", "")).replace(" ", "")
    lhs, _, rhs = equation.partition("->")
    sizes: dict[str, int] = {}
    for term, t in zip(lhs.split(","), v.ins):
        if t is None or t.shape is None:
            continue
        head, _, tail = term.partition("...")
        for letter, size in zip(head, t.shape):
            sizes[letter] = size
        for letter, size in zip(reversed(tail), reversed(t.shape)):
            sizes[letter] = size
    contracted = [s for letter, s in sizes.items() if letter not in rhs] if "->" in equation else []
    if not contracted:
        return float(v.out_numel)
    return 2.0 * v.out_numel * math.prod(contracted)


def _conv_flops(v: NodeView) -> float:
    """2 * N * prod(weight) * prod(spatial): weight [Cout, Cin/group, k...] over the output's
    positions; a transposed conv's weight [Cin, Cout/group, k...] over the input's positions."""
    w = v.shape_in(3 if v.op_type == "QLinearConv" else 1)
    x, out = v.shape_in(0), v.outs[0].shape if v.outs and v.outs[0] is not None else None
    if not w or not x or not out:
        return 0.0
    if v.op_type == "ConvTranspose":
        spatial = x[2:]
    else:
        spatial = out[1:-1] if v.op_type.startswith("Nhwc") else out[2:]
    return 2.0 * x[0] * math.prod(w) * math.prod(spatial)


def _ms_attention_flops(v: NodeView) -> float:
    """com.microsoft Attention / QAttention: x [B, S, Hin] @ W [Hin, Hq+Hk+Hv], then per head
    QK^T and PV: 2*B*S*S_kv*(Hq + Hv) = 4*B*heads*S*S_kv*head_dim when Hq = Hv."""
    x, w = v.shape_in(0), v.shape_in(1)
    if not x or not w or len(x) != 3:
        return 0.0
    batch, seq, hidden_in = x
    sizes = [int(s) for s in v.attrs.get("qkv_hidden_sizes", [])] or [w[-1] // 3] * 3
    hq, _, hv = sizes
    past = v.shape_in(8 if v.op_type == "QAttention" else 4)  # [2, B, heads, P, head_dim]
    s_kv = seq + (past[3] if past and len(past) == 5 else 0)
    projection = 2.0 * batch * seq * hidden_in * w[-1]  # [B, S, Hin] x [Hin, 3H]
    products = 2.0 * batch * seq * s_kv * (hq + hv)  # QK^T [B, h, S, S_kv] and PV [B, h, S, d]
    return projection + products


def _multi_head_attention_flops(v: NodeView) -> float:
    """MultiHeadAttention / GroupQueryAttention (projections done outside): 2*B*S*L*(Dq + Dv)."""
    q, k, out = v.shape_in(0), v.shape_in(1), v.outs[0].shape if v.outs and v.outs[0] is not None else None
    if not q or not out or len(out) != 3:
        return 0.0
    batch, seq, dv = out
    if len(q) == 5:  # packed [B, S, heads, 3, head_dim]
        dq, length = q[2] * q[4], q[1]
    elif v.op_type == "GroupQueryAttention" and not k:  # packed [B, S, (heads + 2 kv_heads) * head_dim]
        dq, length = dv, seq
    else:
        dq = q[2] if len(q) == 3 else q[1] * q[3]
        length = (k[1] if len(k) == 3 else k[2]) if k else seq
    past = v.shape_in(3 if v.op_type == "GroupQueryAttention" else 6)  # [B, kv_heads, P, head_dim]
    if past and len(past) == 4:  # keys: the past ones and the new ones (a preallocated buffer counts whole)
        length += past[2]
    return 2.0 * batch * seq * length * (dq + dv)


def _onnx_attention_flops(v: NodeView) -> float:
    """ONNX (opset 23) Attention: Q [B, Nq, S, d] or [B, S, Nq*d]; no weights inside."""
    q, k, val = v.shape_in(0), v.shape_in(1), v.shape_in(2)
    if not q or not k or not val:
        return 0.0
    past = v.shape_in(4)
    extra = past[2] if past and len(past) == 4 else 0
    if len(q) == 4:
        batch, heads, seq, d = q
        length, dv = k[2] + extra, val[3]
        return 2.0 * batch * heads * seq * length * (d + dv)
    batch, seq, dq = q
    return 2.0 * batch * seq * (k[1] + extra) * (dq + val[2])


def _norm_flops(v: NodeView) -> float:
    per = _NORMS[v.op_type]
    if v.op_type in _SKIP_NORMS:  # the residual add, and the bias add when there is one
        per += 1 + (1 if v.has_in(4) else 0)
    return float(per * v.out_numel)


def _embed_layer_norm_flops(v: NodeView) -> float:
    """Adds of the looked-up rows, the norm (8), and the mask sum (1 per mask element)."""
    tables = sum(1 for i in _EMBED_TABLES if v.has_in(i))
    mask = v.ins[7].numel if v.has_in(7) else 0
    return float((tables - 1 + 8) * v.out_numel + mask)


def _fast_gelu_flops(v: NodeView) -> float:
    return float((8 + (1 if v.has_in(1) else 0)) * v.out_numel)


def node_flops(v: NodeView, kind: str) -> float:
    op = v.op_type
    if op == "Einsum":
        return _einsum_flops(v)
    if op in _PRODUCTS:
        return _product_flops(v)
    if op == "Attention" and v.domain in DEFAULT_DOMAINS:
        return _onnx_attention_flops(v)
    if op in ("Attention", "QAttention"):
        return _ms_attention_flops(v)
    if op in ("MultiHeadAttention", "GroupQueryAttention"):
        return _multi_head_attention_flops(v)
    if op in _CONV:
        return _conv_flops(v)
    if op in _EMBEDDING_FUSED:
        return _embed_layer_norm_flops(v)
    if op in _NORMS:
        return _norm_flops(v)
    if op in _SOFTMAX:
        return 5.0 * v.out_numel
    if op == "FastGelu":
        return _fast_gelu_flops(v)
    if kind == "reduction":
        return float(v.ins[0].numel) if v.has_in(0) else 0.0
    if kind == "elementwise":
        return float(_ELEMENTWISE_FLOPS.get(op, 1) * v.out_numel)
    return 0.0

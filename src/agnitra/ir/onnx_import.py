"""Read an ONNX model into Agnitra's IR, with the same cost conventions as a PyTorch capture.

One IR node per ONNX node. The steps:

1. Concrete shapes. Symbolic or missing input dims are bound from `input_shapes` when given;
   otherwise the first dim becomes 1 (the batch) and any other symbolic dim 128 (a sequence
   length), and `GraphIR.notes` says which dims were assumed. A dim name shared by several
   inputs ("batch") gets one value everywhere.
2. Shapes of every value: ONNX shape inference first; where it leaves values unknown (ONNX
   Runtime's contrib ops such as com.microsoft Attention, or Shape->Gather->Slice chains), ONNX
   Runtime's symbolic shape inference fills them in (given rules here for the int8 contrib ops it
   lacks: QAttention, QEmbedLayerNormalization). Inference runs on a skeleton of the model:
   large initializers become declared graph inputs, so weights are never copied and external
   data is never loaded (only initializer dims are needed). A node whose shapes stay unknown
   gets zero FLOPs and bytes and is named once in the notes.
3. Kind, owning module and cost of each node: the kinds and cost conventions are those of
   `ir.onnx_ops`.

Weights are initializers, and values derived from one only through aliasing ops (Identity,
Transpose, Cast, DequantizeLinear, ...), as views of a parameter in a PyTorch capture. Scalars and
short integer vectors (axes, a shape) are literals, not weights: optimizers fold Constant nodes
into initializers, and a folded `[0]` is no parameter. `IRNode.weight_input` says a weight is read.

Owning modules come from the node name when the TorchScript exporter encoded the module path
("/bert/encoder/layer.0/attention/self/query/MatMul" -> "bert.encoder.layer.0.attention.self.query"),
from the dynamo exporter's metadata ("pkg.torch.onnx.name_scopes", "namespace"), and, for nodes a
fusion renamed, from the names of the values they produce, the weights only they read, or else the
module enclosing the producers of their inputs. The TorchScript exporter records no module types
(`module_type` is "" then); the dynamo exporter's "pkg.torch.onnx.class_hierarchy" gives them.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import onnx
from onnx import TensorProto

from agnitra.errors import WorkloadError, first_line
from agnitra.ir.graph import GraphIR, IRNode
from agnitra.ir.onnx_ops import CONTROL_FLOW, DEFAULT_DOMAINS, WEIGHT_ALIASES, NodeView, Value, dtype_of, node_bytes, node_flops, onnx_kind

__all__ = ["NodeView", "Value", "import_onnx", "module_from_path", "onnx_kind", "weight_matmul_count"]

DEFAULT_BATCH = 1  # an unbound first dim
DEFAULT_DIM = 128  # any other unbound dim (typically a sequence length)
SKELETON_MAX_ELEMENTS = 4096  # initializers larger than this become graph inputs for shape inference


# ---------------------------------------------------------------------------------------------
# Values: shapes from ONNX type information


def _concrete_shape(type_proto: onnx.TypeProto) -> list[int] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return [int(d.dim_value) for d in dims]


def _value_from_info(info: onnx.ValueInfoProto) -> Value:
    name, size = dtype_of(info.type.tensor_type.elem_type) if info.type.HasField("tensor_type") else ("", 0)
    return Value(info.name, _concrete_shape(info.type), name, size)


# ---------------------------------------------------------------------------------------------
# Loading and binding input dims


def _load(model: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The model proto (external data not loaded) and the file stem ("" for a proto)."""
    if isinstance(model, onnx.ModelProto):
        _check_has_graph(model, "the ONNX ModelProto given")
        return model, ""
    path = Path(model)
    if not path.is_file():
        raise WorkloadError(f"no ONNX file at {path}: check the path")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf and onnx raise several types
        raise WorkloadError(f"{path} is not a valid ONNX model ({first_line(exc, 120)}); re-export it") from None
    _check_has_graph(proto, str(path))
    _load_small_external_tensors(proto, path.parent)
    return proto, path.stem


def _check_has_graph(proto: onnx.ModelProto, label: str) -> None:
    """Protobuf parses many non-models without error; a model has an IR version and a graph."""
    if proto.ir_version <= 0 or not proto.HasField("graph") or not (proto.graph.node or proto.graph.output):
        raise WorkloadError(f"{label} is not a valid ONNX model (no graph in it); re-export it")


def _load_small_external_tensors(proto: onnx.ModelProto, base_dir: Path) -> None:
    """Shape computations may need small constants stored externally; large weights stay on disk."""
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for tensor in proto.graph.initializer:
        if uses_external_data(tensor) and math.prod(tensor.dims) <= SKELETON_MAX_ELEMENTS:  # small: load it
            try:
                load_external_data_for_tensor(tensor, str(base_dir))
                tensor.data_location = TensorProto.DEFAULT
                del tensor.external_data[:]
            except Exception:  # noqa: BLE001 - a missing data file leaves the tensor's shape usable
                pass


def _small_external_tensors(graph: onnx.GraphProto) -> list[str]:
    return [t.name for t in graph.initializer
            if t.data_location == TensorProto.EXTERNAL and math.prod(t.dims) <= SKELETON_MAX_ELEMENTS]


def _graph_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Inputs that are not initializers (old models list initializers as inputs too)."""
    initializers = {t.name for t in graph.initializer}
    return [i for i in graph.input if i.name not in initializers]


def _bind_dims(graph: onnx.GraphProto, input_shapes: dict[str, list[int]]) -> tuple[dict[str, list[int]], list[str]]:
    """Concrete shape of every graph input, and a description of each dim that was assumed."""
    inputs = _graph_inputs(graph)
    known = {i.name for i in inputs}
    unknown = sorted(set(input_shapes) - known)
    if unknown:
        raise WorkloadError(
            f"input_shapes names {', '.join(unknown)}, not inputs of the model; its inputs: {', '.join(sorted(known))}"
        )
    by_param: dict[str, int] = {}
    for info in inputs:  # bind named dims from the given shapes first, so every input agrees on them
        given = input_shapes.get(info.name)
        dims = info.type.tensor_type.shape.dim
        if given is None:
            continue
        if len(given) != len(dims):
            raise WorkloadError(f"input '{info.name}' has rank {len(dims)}, input_shapes gives {list(given)}")
        for pos, (d, value) in enumerate(zip(dims, given)):
            if d.HasField("dim_value") and d.dim_value != value:
                raise WorkloadError(f"input '{info.name}' dim {pos} is fixed at {d.dim_value}, input_shapes gives {value}")
            if d.dim_param:
                by_param.setdefault(d.dim_param, int(value))
    shapes, assumed = {}, []
    for info in inputs:
        given = input_shapes.get(info.name)
        shape = []
        for pos, d in enumerate(info.type.tensor_type.shape.dim):
            if given is not None:
                shape.append(int(given[pos]))
            elif d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif d.dim_param and d.dim_param in by_param:
                shape.append(by_param[d.dim_param])
            else:
                value = DEFAULT_BATCH if pos == 0 else DEFAULT_DIM
                if d.dim_param:
                    by_param[d.dim_param] = value
                label = f" '{d.dim_param}'" if d.dim_param else ""
                assumed.append(f"{info.name}[{pos}]{label}={value}")
                shape.append(value)
        shapes[info.name] = shape
    return shapes, assumed


def _skeleton(proto: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """A copy for shape inference: bound inputs, no value_info, large initializers as typed inputs."""
    skeleton = onnx.ModelProto()
    skeleton.ir_version = proto.ir_version
    skeleton.opset_import.extend(proto.opset_import)
    skeleton.functions.extend(proto.functions)
    graph = skeleton.graph
    graph.name = proto.graph.name
    graph.node.extend(proto.graph.node)
    graph.output.extend(proto.graph.output)
    declared = {i.name for i in proto.graph.input}
    for info in _graph_inputs(proto.graph):
        elem = info.type.tensor_type.elem_type
        graph.input.append(onnx.helper.make_tensor_value_info(info.name, elem, shapes[info.name]))
    for tensor in proto.graph.initializer:
        small = math.prod(tensor.dims) <= SKELETON_MAX_ELEMENTS and tensor.data_location != TensorProto.EXTERNAL
        if small:
            graph.initializer.append(tensor)
            if tensor.name in declared:
                graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        else:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    by_param = _param_values(proto.graph, shapes)
    for out in graph.output:  # outputs: bound names get their value; other symbolic dims are left to inference
        for d in out.type.tensor_type.shape.dim:
            if d.dim_param in by_param:
                d.dim_value = by_param[d.dim_param]
            elif d.dim_param:
                d.ClearField("dim_param")
    return skeleton


def _param_values(graph: onnx.GraphProto, shapes: dict[str, list[int]]) -> dict[str, int]:
    """dim_param name -> the value its input dims were bound to."""
    values = {}
    for info in _graph_inputs(graph):
        for d, value in zip(info.type.tensor_type.shape.dim, shapes[info.name]):
            if d.dim_param:
                values.setdefault(d.dim_param, value)
    return values


# ---------------------------------------------------------------------------------------------
# Shape inference


def _collect(infos, table: dict[str, Value]) -> None:
    """Add concrete shapes to `table`, never replacing a concrete one."""
    for info in infos:
        value = _value_from_info(info)
        old = table.get(info.name)
        if old is None or (old.shape is None and value.shape is not None):
            if old is not None and not value.dtype:
                value.dtype, value.itemsize = old.dtype, old.itemsize
            table[info.name] = value


def _missing(graph: onnx.GraphProto, table: dict[str, Value]) -> bool:
    return any(o and (o not in table or table[o].shape is None) for n in graph.node for o in n.output)


def _infer_values(skeleton: onnx.ModelProto, notes: list[str]) -> dict[str, Value]:
    """Value name -> shape and dtype: ONNX inference, then ORT's symbolic inference for the rest."""
    table: dict[str, Value] = {}
    _collect(skeleton.graph.input, table)
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton, check_type=False, strict_mode=False, data_prop=True)
        _collect(list(inferred.graph.value_info) + list(inferred.graph.output), table)
    except Exception as exc:  # noqa: BLE001 - inference errors must not stop the import
        notes.append(f"ONNX shape inference failed ({first_line(exc, 120)}); used ONNX Runtime's symbolic inference")
    if _missing(skeleton.graph, table):
        _collect(_symbolic_value_infos(skeleton, notes), table)
    return table


def _symbolic_value_infos(skeleton: onnx.ModelProto, notes: list[str]) -> list[onnx.ValueInfoProto]:
    """ONNX Runtime's symbolic shape inference; partial results are kept when it stops early.

    Its public `infer_shapes` raises on an incomplete result (and writes a file into the working
    directory), so the inference loop is run here and its known values read directly.
    """
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        notes.append("onnxruntime is not installed: contrib-op shapes were not inferred")
        return []
    try:
        inference = SymbolicShapeInference(int_max=2**31 - 1, auto_merge=True, guess_output_rank=False, verbose=0)
        for op_type, rule in _contrib_shape_rules(inference).items():
            inference.dispatcher_.setdefault(op_type, rule)
        inference._preprocess(skeleton)
        while inference.run_:
            inference._infer_impl()
        return list(inference.known_vi_.values())
    except Exception as exc:  # noqa: BLE001 - it asserts and raises on models it cannot follow
        notes.append(f"ONNX Runtime symbolic shape inference stopped ({first_line(exc, 120)})")
        return []


def _contrib_shape_rules(inference) -> dict[str, Callable[[onnx.NodeProto], None]]:
    """Shape rules for contrib ops ONNX Runtime's symbolic inference lacks: those its dynamic int8
    quantisation puts in a fused transformer (QEmbedLayerNormalization, QAttention) and the
    int8 products that return float."""

    def elem_type(name: str) -> int:
        return inference.known_vi_[name].type.tensor_type.elem_type

    def set_output(node: onnx.NodeProto, index: int, elem: int, shape: list) -> None:
        if index < len(node.output) and node.output[index]:
            name = node.output[index]
            inference.known_vi_[name].CopyFrom(onnx.helper.make_tensor_value_info(name, elem, shape))

    def q_embed_layer_norm(node: onnx.NodeProto) -> None:
        ids, table = inference._get_shape(node, 0), inference._get_shape(node, 2)  # [B, S], [vocab, H]
        set_output(node, 0, elem_type(node.input[8]), [*ids, table[1]])  # float, as the word table's scale
        set_output(node, 1, TensorProto.INT32, [ids[0]])  # mask index [B]

    def q_attention(node: onnx.NodeProto) -> None:
        x, w = inference._get_shape(node, 0), inference._get_shape(node, 1)  # [B, S, Hin], [Hin, Hq+Hk+Hv]
        sizes = [int(a) for a in _attributes(node).get("qkv_hidden_sizes", [])] or [w[1] // 3] * 3
        set_output(node, 0, elem_type(node.input[2]), [x[0], x[1], sizes[2]])  # float, as the bias
        if len(node.output) > 1 and node.output[1]:  # present [2, B, heads, P + S, head_dim]
            heads = int(_attributes(node).get("num_heads", 1))
            past = inference._get_shape(node, 8) if len(node.input) > 8 and node.input[8] else None
            total = x[1] + (past[3] if past else 0)
            set_output(node, 1, elem_type(node.input[2]), [2, x[0], heads, total, sizes[2] // heads])

    def product_to_float(scale_index: int) -> Callable[[onnx.NodeProto], None]:
        return lambda node: inference._compute_matmul_shape(node, elem_type(node.input[scale_index]))

    return {
        "QEmbedLayerNormalization": q_embed_layer_norm,
        "QAttention": q_attention,
        "DynamicQuantizeMatMul": product_to_float(2),  # A, B, b_scale
        "MatMulIntegerToFloat": product_to_float(2),  # A, B, a_scale
    }


# ---------------------------------------------------------------------------------------------
# Owning modules


def module_from_path(name: str, known: set[str] | None = None) -> str | None:
    """'/bert/encoder/layer.0/attention/self/query/MatMul' -> 'bert.encoder.layer.0.attention.self.query'.

    A leading '/' and the final (operator) segment are dropped; None when the name has no '/'.
    The TorchScript exporter names each module on the call stack by the tail of its qualified
    name from its last non-numeric atom ('stages.0.0' for stages.0.0, 'layer.0' for
    bert.encoder.layer.0), so a numbered segment may repeat its parent's tail:
    '/stages/stages.0/stages.0.0/reduce/reduce.0/Conv' -> 'stages.0.0.reduce.0'. A module called
    again in the same scope gets a suffix ('relu_1'); given `known` (the paths of all node names,
    from `_scope_paths`), 'relu_1' is read as 'relu' when that sibling exists.
    """
    if "/" not in name:
        return None
    path: list[str] = []
    for segment in _scope_segments(name):
        path = _join_scope(path, _called_again(path, segment, known).split("."))
    return ".".join(path)


def _scope_segments(name: str) -> list[str]:
    return [p for p in name.strip("/").split("/")[:-1] if p]


def _join_scope(parent: list[str], segment: list[str]) -> list[str]:
    """Qualified name of a module from its parent's and its own unqualified name (as atoms)."""
    if len(segment) > 1:  # 'stages.0' under 'stages': a numbered child of the parent itself
        for overlap in range(min(len(parent), len(segment) - 1), 0, -1):
            if parent[-overlap:] == segment[:overlap]:
                return parent + segment[overlap:]
    return parent + segment


def _called_again(parent: list[str], segment: str, known: set[str] | None) -> str:
    """'relu_2' -> 'relu' when the exporter's repeat-call suffix is evident (a 'relu' sibling exists)."""
    base, _, suffix = segment.rpartition("_")
    if known and base and suffix.isdigit() and ".".join(_join_scope(parent, base.split("."))) in known:
        return base
    return segment


def _scope_paths(graph: onnx.GraphProto) -> set[str]:
    """Every module path the node names spell out, taken literally (repeat-call suffixes kept)."""
    paths = set()
    for node in graph.node:
        path: list[str] = []
        for segment in _scope_segments(node.name) if "/" in node.name else []:
            path = _join_scope(path, segment.split("."))
            paths.add(".".join(path))
    return paths


def _module_from_metadata(node: onnx.NodeProto) -> tuple[str, str] | None:
    """(module, module type) from the dynamo exporter's metadata, innermost module last."""
    props = {p.key: p.value for p in node.metadata_props}
    scopes = _literal_list(props.get("pkg.torch.onnx.name_scopes"))
    classes = _literal_list(props.get("pkg.torch.onnx.class_hierarchy"))
    if scopes is None and "namespace" in props:  # ': pkg.M/blk: pkg.Blk/linear: aten.linear.default'
        pairs = [seg.split(": ", 1) for seg in props["namespace"].split("/")]
        scopes = [p[0].strip() for p in pairs]
        classes = [p[1].strip() if len(p) > 1 else "" for p in pairs]
    if not scopes:
        return None
    classes = classes if classes and len(classes) == len(scopes) else [""] * len(scopes)
    modules = [(s, c) for s, c in zip(scopes, classes) if _is_module_class(c)]
    if not any(classes):  # no classes: the last scope is the operator
        modules = list(zip(scopes[:-1], classes[:-1]))
    if not modules:
        return "", ""
    scope, cls = modules[-1]
    return scope, cls.rsplit(".", 1)[-1]


def _is_module_class(cls: str) -> bool:
    """'torch.nn.modules.linear.Linear' is a module; 'aten.linear.default' is an operator."""
    last = cls.rsplit(".", 1)[-1]
    return bool(last) and last[0].isupper() and not cls.startswith(("aten.", "prims.", "<"))


def _literal_list(text: str | None) -> list[str] | None:
    if not text:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else None


def _module_from_param_names(names: list[str]) -> str | None:
    """Common module path of dotted parameter names ('bert.embeddings.word_embeddings.weight')."""
    paths = [n.rsplit(".", 1)[0] for n in names if "." in n and "/" not in n and "::" not in n]
    return (_common_module(paths) or None) if paths else None


def _common_module(modules: list[str]) -> str:
    """The innermost module containing all of `modules` ('' = the root, or no modules)."""
    if not modules:
        return ""
    paths = [m.split(".") if m else [] for m in modules]
    common = []
    for parts in zip(*paths):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return ".".join(common)


def _owner(node: onnx.NodeProto, name: str, own_weights: list[str], producer_modules: list[str],
           known: set[str]) -> tuple[str, str]:
    """(module, module type) of a node, trying the encodings exporters and fusions leave.

    In order: the dynamo exporter's metadata; a TorchScript node name; for nodes a fusion created,
    the name of a value they produce (fusions keep the replaced subgraph's output names); for
    Identity copies of weights, the weight's name; then the weights only this node reads
    ('bert.embeddings.word_embeddings.weight', ...); last, the module enclosing its inputs' producers.
    """
    from_metadata = _module_from_metadata(node)
    if from_metadata is not None:
        return from_metadata
    from_name = module_from_path(name, known)
    if from_name is not None:
        return from_name, ""
    for out in node.output:
        from_value = module_from_path(out, known)
        if from_value is not None:
            return from_value, ""
    from_params = _module_from_param_names([o for o in node.output if o]) or _module_from_param_names(own_weights)
    if from_params is not None:
        return from_params, ""
    return _common_module(producer_modules), ""


# ---------------------------------------------------------------------------------------------
# Nodes


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    attrs = {}
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.TENSOR):
            continue
        value = onnx.helper.get_attribute_value(a)
        attrs[a.name] = value.decode() if isinstance(value, bytes) else value
    return attrs


def _op_name(node: onnx.NodeProto) -> str:
    domain = node.domain if node.domain not in DEFAULT_DOMAINS else "onnx"
    return f"{domain}::{node.op_type}"


def _unique_names(graph: onnx.GraphProto) -> list[str]:
    """Node names, generated ('Cast_12') where missing and suffixed where repeated."""
    taken = {n.name for n in graph.node if n.name}
    seen: set[str] = set()
    names = []
    for index, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{index}"
        if name in seen or (not node.name and name in taken):
            suffix = 1
            while f"{name}_{suffix}" in seen or f"{name}_{suffix}" in taken:
                suffix += 1
            name = f"{name}_{suffix}"
        seen.add(name)
        names.append(name)
    return names


_INTEGER_TYPES = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
                  TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL}


def _is_literal(tensor: TensorProto) -> bool:
    """A scalar or a short integer vector (axes, starts, a shape): what an exporter's Constant nodes
    hold, and what graph optimizers fold into initializers. Not a weight."""
    numel = math.prod(tensor.dims)
    return numel <= 1 or (tensor.data_type in _INTEGER_TYPES and len(tensor.dims) <= 1 and numel <= 16)


def _weights(graph: onnx.GraphProto) -> set[str]:
    """Initializers (literals aside) and values derived from them only through aliasing ops."""
    weights = {t.name for t in graph.initializer if not _is_literal(t)}
    for node in graph.node:  # nodes are topologically sorted
        if node.op_type in WEIGHT_ALIASES and node.input and node.input[0] in weights:
            weights.update(o for o in node.output if o)
    return weights


def _resolve(names, table: dict[str, Value], weights: set[str]) -> tuple[list[Value | None], bool]:
    """Values at each position (None where omitted) and whether all named ones have known shapes."""
    values, complete = [], True
    for n in names:
        if not n:
            values.append(None)
            continue
        known = table.get(n) or Value(n, None, "", 0)
        complete = complete and known.shape is not None
        values.append(dataclasses.replace(known, weight=n in weights))
    return values, complete


@dataclass
class _GraphContext:
    """What each node's conversion needs to know about the whole graph."""

    table: dict[str, Value]  # value name -> shape and dtype
    weights: set[str]  # weight values (see `_weights`)
    readers: dict[str, int]  # value name -> how many nodes read it
    scopes: set[str]  # module paths spelled by node names (see `_scope_paths`)
    producer: dict[str, str] = dataclasses.field(default_factory=dict)  # value name -> IR node name
    modules: dict[str, str] = dataclasses.field(default_factory=dict)  # IR node name -> its module


def _ir_node(node: onnx.NodeProto, name: str, context: _GraphContext) -> tuple[IRNode, bool]:
    """The IR node, and whether its shapes were known (else its costs are 0)."""
    ins, ins_known = _resolve(node.input, context.table, context.weights)
    outs, outs_known = _resolve(node.output, context.table, context.weights)
    known = ins_known and outs_known

    def inputs_weight(positions: tuple[int, ...]) -> bool:
        chosen = positions or tuple(range(len(ins)))
        return any(i < len(ins) and ins[i] is not None and ins[i].weight for i in chosen)

    kind = onnx_kind(node.op_type, inputs_weight)
    view = NodeView(node.op_type, node.domain, _attributes(node), ins, outs)
    flops, (read, written) = (node_flops(view, kind), node_bytes(view)) if known else (0.0, (0.0, 0.0))
    present_ins = [v for v in ins if v is not None]
    present_outs = [v for v in outs if v is not None]
    own_weights = [v.name for v in present_ins if v.weight and context.readers.get(v.name, 0) == 1]
    producer_modules = [context.modules[context.producer[v.name]] for v in present_ins
                        if v.name in context.producer and not v.weight]
    module, module_type = _owner(node, name, own_weights, producer_modules, context.scopes)
    ir = IRNode(
        name=name, op=_op_name(node), kind=kind, module=module, module_type=module_type,
        inputs=[context.producer.get(v.name, v.name) for v in present_ins],
        input_shapes=[v.shape or [] for v in present_ins], input_dtypes=[v.dtype for v in present_ins],
        output_shapes=[v.shape or [] for v in present_outs], output_dtypes=[v.dtype for v in present_outs],
        weight_input=any(v.weight for v in present_ins),
        flops=float(flops), bytes_read=float(read), bytes_written=float(written),
    )
    context.modules[name] = module
    context.producer.update({o: name for o in node.output if o})
    return ir, known


def _reader_counts(graph: onnx.GraphProto) -> dict[str, int]:
    """Value name -> how many nodes read it."""
    counts: dict[str, int] = {}
    for node in graph.node:
        for name in set(node.input):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _initializer_totals(graph: onnx.GraphProto) -> tuple[int, int]:
    elements = [(math.prod(t.dims), dtype_of(t.data_type)[1]) for t in graph.initializer]
    return sum(n for n, _ in elements), int(sum(n * size for n, size in elements))


def _model_name(name: str | None, stem: str, graph: onnx.GraphProto) -> str:
    return name or stem or graph.name or "onnx-model"


def import_onnx(model: str | Path | onnx.ModelProto, input_shapes: dict[str, list[int]] | None = None,
                name: str | None = None) -> GraphIR:
    """The IR of an ONNX model (a file or a loaded proto, which is not modified).

    `input_shapes` binds input dims by input name ({"input_ids": [8, 128]}); dims it does not
    bind are assumed: the first 1, others 128 (listed in the IR's notes).
    """
    proto, stem = _load(model)
    graph = proto.graph
    notes: list[str] = []
    if _small_external_tensors(graph):
        notes.append("small initializers are stored externally and were not loaded (pass the file path, not "
                      "a ModelProto): shapes computed from them are unknown")
    shapes, assumed = _bind_dims(graph, dict(input_shapes or {}))
    if assumed:
        notes.append(f"assumed input dims (pass input_shapes to set them): {', '.join(assumed)}")
    table = _infer_values(_skeleton(proto, shapes), notes)
    for tensor in graph.initializer:
        dtype, size = dtype_of(tensor.data_type)
        table[tensor.name] = Value(tensor.name, [int(d) for d in tensor.dims], dtype, size)
    context = _GraphContext(table, _weights(graph), _reader_counts(graph), _scope_paths(graph))
    nodes, unknown = [], []
    for node, node_name in zip(graph.node, _unique_names(graph)):
        ir, known = _ir_node(node, node_name, context)
        nodes.append(ir)
        if not known:
            unknown.append(f"{node_name} ({ir.op})")
    notes.extend(_node_notes(graph, nodes, unknown))
    params, param_bytes = _initializer_totals(graph)
    inputs = [{"name": i.name, "shape": shapes[i.name], "dtype": dtype_of(i.type.tensor_type.elem_type)[0]}
              for i in _graph_inputs(graph)]
    return GraphIR(name=_model_name(name, stem, graph), source="onnx", nodes=nodes, inputs=inputs,
                   params=params, param_bytes=param_bytes, notes=notes)


def _node_notes(graph: onnx.GraphProto, nodes: list[IRNode], unknown: list[str]) -> list[str]:
    notes = []
    if unknown:
        notes.append(
            f"shapes unknown after shape inference for {len(unknown)} node(s), counted as 0 FLOPs and 0 bytes: "
            + ", ".join(unknown)
        )
    uncosted = sorted({n.op for n in nodes if n.kind == "other" and n.op.split("::")[-1] not in CONTROL_FLOW})
    if uncosted:
        notes.append(f"no cost model for {', '.join(uncosted)}: kind 'other', 0 FLOPs, bytes from their tensors")
    control = [n.name for n, p in zip(nodes, graph.node) if p.op_type in CONTROL_FLOW]
    if control:
        notes.append(f"control-flow bodies are not imported (their work is not counted): {', '.join(control)}")
    return notes


def weight_matmul_count(ir: GraphIR) -> int:
    """Products with a weight: matmul-kind nodes, plus 3 per weight-carrying fused Attention.

    ONNX Runtime's Attention (and QAttention) takes the Q, K and V projection weights as one
    packed input: it stands for three weight products of the unfused graph (its FLOPs include
    them, under the kind 'attention'), so unfused and fused graphs give the same count.
    """
    fused = {"com.microsoft::Attention", "com.microsoft::QAttention"}
    return sum(1 for n in ir.nodes if n.kind == "matmul") + sum(3 for n in ir.nodes if n.op in fused and n.weight_input)

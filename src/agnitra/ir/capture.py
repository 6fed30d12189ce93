"""Capture a model into Agnitra's IR.

torch.export (non-strict) first: its graph keeps each node's owning module (`nn_module_stack`)
and fake tensors with shapes and dtypes, from which FLOPs and bytes are counted. Where export
fails (data-dependent control flow, unsupported ops), the model is traced at the dispatch level
during one eager run, with module ownership from forward hooks, and TorchDynamo lists every
graph break with its reason and source line, so the user sees why instead of a crash. ONNX
models are read by `ir.onnx_import`.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import nn

from agnitra.errors import first_line
from agnitra.ir.graph import GraphBreak, GraphIR, IRNode, aten_kind
from agnitra.ir.trace import trace_dispatch
from agnitra.telemetry.opcount import cost_of
from agnitra.workloads.safe_load import quiet_library  # a failed export logs the whole graph; its one line says it


def capture(model: nn.Module, example_inputs: tuple, name: str | None = None) -> GraphIR:
    """The IR of `model(*example_inputs)`: exported when possible, else traced with graph breaks."""
    name = name or type(model).__name__
    try:
        with torch.no_grad(), quiet_library():
            program = torch.export.export(model, tuple(example_inputs), strict=False)
        return ir_from_export(program, name)
    except Exception as exc:  # noqa: BLE001 - export raises many types; the fallback says why
        export_error = first_line(exc, limit=300)
    ir = trace_dispatch(model, tuple(example_inputs), name)
    ir.source = "dynamo"
    ir.graph_breaks = dynamo_graph_breaks(model, tuple(example_inputs))
    ir.notes.insert(0, f"torch.export failed ({export_error}); nodes come from a dispatch-level trace of one eager run")
    return ir


def _type_name(value: Any) -> str:
    if isinstance(value, str):
        return value.rsplit(".", 1)[-1]
    return getattr(value, "__name__", str(value))


def _owner(node: torch.fx.Node) -> tuple[str, str]:
    """(qualified name, class name) of the innermost module on the node's stack; root is ''."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    qualname, module_type = list(stack.values())[-1]
    return (qualname if qualname not in ("L__self__",) else ""), _type_name(module_type)


def _meta(arg: Any) -> Any:
    """Replace fx nodes in an argument tree by their example values (fake tensors)."""
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_meta(a) for a in arg)
    if isinstance(arg, dict):
        return {k: _meta(v) for k, v in arg.items()}
    return arg


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _shapes(tree: Any) -> tuple[list[list[int]], list[str]]:
    tensors = _tensors(tree)
    return [list(t.shape) for t in tensors], [str(t.dtype).replace("torch.", "") for t in tensors]


def ir_from_export(program, name: str) -> GraphIR:
    sig = program.graph_signature
    weights = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
    state = program.state_dict
    producer: dict[str, str] = {}  # fx node name -> IR name (params keep their fqn)
    nodes: list[IRNode] = []
    inputs = []
    for node in program.graph.nodes:
        if node.op == "placeholder":
            producer[node.name] = weights.get(node.name, node.name)
            if node.name not in weights and isinstance(node.meta.get("val"), torch.Tensor):
                val = node.meta["val"]
                inputs.append({"name": node.name, "shape": list(val.shape), "dtype": str(val.dtype).replace("torch.", "")})
        elif node.op == "call_function":
            if node.target is operator.getitem:  # a projection of a tuple output: alias its producer
                producer[node.name] = producer.get(node.args[0].name, node.args[0].name)
                continue
            nodes.append(_export_node(node, producer, weights))
            producer[node.name] = node.name
    parameters = {id(state[fqn]): state[fqn] for fqn in sig.inputs_to_parameters.values() if fqn in state}  # tied weights once
    stored = {id(t): t for t in state.values()}
    params = sum(t.numel() for t in parameters.values())
    param_bytes = sum(t.numel() * t.element_size() for t in stored.values())
    return GraphIR(name=name, source="export", nodes=nodes, inputs=inputs, params=params, param_bytes=param_bytes)


def _export_node(node: torch.fx.Node, producer: dict[str, str], weights: dict[str, str]) -> IRNode:
    module, module_type = _owner(node)
    arg_nodes = [a for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
    weight_input = any(a.name in weights for a in arg_nodes)
    args, kwargs, out = _meta(node.args), _meta(node.kwargs), node.meta.get("val")
    in_shapes, in_dtypes = _shapes((args, kwargs))
    out_shapes, out_dtypes = _shapes(out)
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        cost = cost_of(target, args, kwargs, out)
        op, flops, read, written = cost.op, cost.flops, cost.bytes_read, cost.bytes_written
        kind = aten_kind(op, weight_input, pointwise=torch.Tag.pointwise in target.tags)
    else:  # higher-order ops, Python callables: kept in the graph, not costed
        op, flops, read, written, kind = _callable_name(target), 0.0, 0.0, 0.0, "other"
    return IRNode(
        name=node.name, op=op, kind=kind, module=module, module_type=module_type,
        inputs=[producer.get(a.name, a.name) for a in arg_nodes],
        input_shapes=in_shapes, input_dtypes=in_dtypes, output_shapes=out_shapes, output_dtypes=out_dtypes,
        weight_input=weight_input, flops=flops, bytes_read=read, bytes_written=written,
    )


def _callable_name(target: Any) -> str:
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def dynamo_graph_breaks(model: nn.Module, example_inputs: tuple) -> list[GraphBreak]:
    """Every graph break TorchDynamo hits on these inputs, with its reason and user source line."""
    import torch._dynamo

    try:
        with torch.no_grad(), quiet_library():
            explained = torch._dynamo.explain(model)(*example_inputs)
    except Exception as exc:  # noqa: BLE001 - explain itself can fail; say so as a break
        return [GraphBreak(reason=f"TorchDynamo could not analyse the model: {first_line(exc)}", location="")]
    finally:
        torch._dynamo.reset()
    breaks = []
    for reason in explained.break_reasons:
        frames = list(getattr(reason, "user_stack", None) or [])
        location = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        breaks.append(GraphBreak(reason=" ".join(str(reason.reason).split())[:500], location=location))
    return breaks

"""Channel spaces: which axes of a model's weights can be permuted together without changing what
the model computes.

The model is exported once (torch.export, non-strict) and every dimension of every tensor in its
graph (activations, parameters, buffers) starts as its own class. Each op joins the dimensions it
keeps in order (an elementwise op joins its operands' aligned dimensions, a Linear its input's
last dimension with its weight's columns and its output's last with the weight's rows, a norm
its channels with its weight...), records how a reshape splits one dimension into several (an
attention projection's output into heads x head size: a `Product`), and freezes a dimension it
does not treat as an unordered set of channels (a slice, a concatenation, an index, an op it does
not know, the model's inputs and outputs). What is left are classes whose every member may take
the same permutation: a Linear's hidden units with the next Linear's inputs, a convolution's
channels with its BatchNorm's statistics and the next convolution's inputs, attention heads with
their output projection's columns, and the residual stream of a whole transformer."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

aten = torch.ops.aten

DimKey = tuple  # (node name, dim) for tensors; ("param", qualified name, dim) for weights and buffers


@dataclass(frozen=True)
class Axis:
    """One dimension of one parameter or buffer, by its qualified name in the model."""

    name: str
    dim: int


@dataclass
class Space:
    """A class of dimensions that take one permutation: the axes of the weights it moves, the
    composite spaces it is a factor of, and why it cannot move (`frozen`, '' where it can)."""

    id: int
    size: int
    axes: list[Axis] = field(default_factory=list)
    frozen: list[str] = field(default_factory=list)
    factors: tuple[int, ...] = ()  # a composite: the spaces it is the row-major product of
    part_of: list[int] = field(default_factory=list)  # composites this space is a factor of

    @property
    def free(self) -> bool:
        return not self.frozen and not self.factors and self.size > 1

    def describe(self) -> str:
        names = sorted({f"{a.name}[{a.dim}]" for a in self.axes})
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return f"space {self.id} ({self.size} channels: {shown or 'activations only'})"


class _Classes:
    """Union-find over dimension keys, with each class's size and why it is frozen."""

    def __init__(self) -> None:
        self.parent: dict[DimKey, DimKey] = {}
        self.size: dict[DimKey, int] = {}
        self.frozen: dict[DimKey, list[str]] = {}
        self.products: list[tuple[DimKey, tuple[DimKey, ...]]] = []

    def add(self, key: DimKey, size: int) -> DimKey:
        if key not in self.parent:
            self.parent[key], self.size[key] = key, int(size)
        return key

    def find(self, key: DimKey) -> DimKey:
        root = key
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[key] != root:
            self.parent[key], key = root, self.parent[key]
        return root

    def union(self, a: DimKey, b: DimKey, why: str = "") -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] != self.size[rb]:  # not one channel set after all: neither may move
            self.freeze(ra, f"{why or 'an op'} joins {self.size[ra]} with {self.size[rb]} channels")
            self.freeze(rb, f"{why or 'an op'} joins {self.size[ra]} with {self.size[rb]} channels")
            return
        self.parent[rb] = ra
        self.frozen.setdefault(ra, []).extend(self.frozen.pop(rb, []))

    def freeze(self, key: DimKey, why: str) -> None:
        root = self.find(key)
        reasons = self.frozen.setdefault(root, [])
        if why not in reasons:
            reasons.append(why)


def _shape(node: Any) -> tuple[int, ...] | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    if isinstance(value, torch.Tensor):
        return tuple(int(s) for s in value.shape)
    return None


ELEMENTWISE = {
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.neg.default, aten.pow.Tensor_Scalar, aten.rsqrt.default, aten.sqrt.default,
    aten.exp.default, aten.tanh.default, aten.sigmoid.default, aten.silu.default, aten.gelu.default, aten.relu.default, aten.relu_.default,
    aten.dropout.default, aten.to.dtype, aten.to.device, aten.to.dtype_layout, aten.type_as.default, aten.clone.default, aten.contiguous.default,
    aten.clamp_min.default, aten.clamp.default, aten.where.self, aten.ge.Scalar, aten.gt.Scalar, aten.le.Scalar, aten.lt.Scalar, aten.eq.Scalar,
    aten.__and__.Tensor, aten.logical_and.default, aten.logical_not.default, aten.masked_fill.Scalar, aten.softmax.int, aten._softmax.default,
    aten.log_softmax.int, aten.add.Scalar, aten.mul.Scalar, aten.sub.Scalar, aten.div.Scalar, aten.hardtanh.default, aten.hardtanh_.default,
    aten.leaky_relu.default, aten.gelu_.default, aten.silu_.default, aten.abs.default, aten.erf.default, aten.alias.default, aten.detach.default,
    aten.lift_fresh_copy.default, aten._to_copy.default,
}
UNIFORM_FACTORIES = {aten.new_ones.default, aten.ones.default, aten.zeros.default, aten.full.default, aten.new_zeros.default, aten.new_full.default,
                     aten.ones_like.default, aten.zeros_like.default, aten.full_like.default}
REDUCTIONS = {aten.mean.dim, aten.sum.dim_IntList, aten.amax.default, aten.amin.default, aten.linalg_vector_norm.default, aten.var.correction,
              aten.std.correction}
NO_VALUE = {aten._assert_tensor_metadata.default, aten.sym_size.int, aten._assert_scalar.default}


class _Analysis:
    def __init__(self, ep: torch.export.ExportedProgram) -> None:
        self.ep, self.c = ep, _Classes()
        signature = ep.graph_signature
        self.weights = {**signature.inputs_to_parameters, **signature.inputs_to_buffers, **getattr(signature, "inputs_to_lifted_tensor_constants", {})}
        self.user_inputs = set(signature.user_inputs)

    def dim(self, node: fx.Node, d: int) -> DimKey:
        shape = _shape(node)
        return self.c.add((node.name, d % len(shape)), shape[d])

    def dims(self, node: Any) -> list[DimKey]:
        shape = _shape(node)
        return [self.dim(node, d) for d in range(len(shape))] if shape is not None else []

    def freeze_all(self, node: Any, why: str) -> None:
        for key in self.dims(node):
            self.c.freeze(key, why)

    def join(self, a: fx.Node, da: int, b: fx.Node, db: int, why: str) -> None:
        sa, sb = _shape(a), _shape(b)
        if sa is None or sb is None or sa[da] <= 1 or sb[db] <= 1:
            return
        self.c.union(self.dim(a, da), self.dim(b, db), why)

    def run(self) -> None:
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self._output(node)

    def _placeholder(self, node: fx.Node) -> None:
        name = self.weights.get(node.name)
        if name is not None:
            for d, key in enumerate(self.dims(node)):
                self.c.union(self.c.add(("param", name, d), self.c.size[key]), key)
        elif node.name in self.user_inputs:
            self.freeze_all(node, "it reaches the model's inputs")

    def _output(self, node: fx.Node) -> None:
        user_outputs = set(self.ep.graph_signature.user_outputs)
        for leaf in _leaves(node.args[0]):
            if isinstance(leaf, fx.Node) and leaf.name in user_outputs:
                self.freeze_all(leaf, "it reaches the model's outputs")

    def _call(self, node: fx.Node) -> None:
        target, args = node.target, node.args
        name = getattr(target, "__name__", str(target))
        if target in NO_VALUE:
            return
        if target is operator.getitem:
            source = args[0]
            value = source.meta.get("val") if isinstance(source, fx.Node) else None
            if isinstance(value, (tuple, list)) and isinstance(args[1], int) and _shape(node) is not None:
                self.freeze_all(node, f"an output of {getattr(source.target, '__name__', source.target)} is not followed")
            return
        if _shape(node) is None:
            return
        handler = _HANDLERS.get(target)
        if handler is not None:
            handler(self, node)
        elif target in ELEMENTWISE:
            self._elementwise(node)
        elif target in UNIFORM_FACTORIES:
            return  # the same value in every channel: any order
        elif target in REDUCTIONS:
            self._reduction(node)
        else:
            self._unknown(node, name)

    def _unknown(self, node: fx.Node, name: str) -> None:
        why = f"{name} is not known to keep channels in order"
        self.freeze_all(node, why)
        for arg in node.all_input_nodes:
            self.freeze_all(arg, why)

    def _elementwise(self, node: fx.Node) -> None:
        out = _shape(node)
        for arg in node.all_input_nodes:
            shape = _shape(arg)
            if shape is None:
                continue
            for back in range(1, min(len(shape), len(out)) + 1):
                if shape[-back] == out[-back]:
                    self.join(arg, -back, node, -back, str(node.target))

    def _reduction(self, node: fx.Node) -> None:
        x, shape, out = node.args[0], _shape(node.args[0]), _shape(node)
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if node.target is aten.linalg_vector_norm.default:
            dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim")
        reduced = set(range(len(shape))) if dims is None else {d % len(shape) for d in ([dims] if isinstance(dims, int) else dims)}
        kept = [d for d in range(len(shape)) if d not in reduced]
        keepdim = len(out) == len(shape)
        for i, d in enumerate(kept):
            self.join(x, d, node, d if keepdim else i, "a reduction")


def _leaves(value: Any):
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    else:
        yield value


# ---- ops that move or contract dimensions ---------------------------------------------------------


def _linear(a: _Analysis, node: fx.Node) -> None:
    x, weight = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else None
    rank = len(_shape(x))
    for d in range(rank - 1):
        a.join(x, d, node, d, "linear")
    a.join(x, -1, weight, 1, "linear")
    a.join(node, -1, weight, 0, "linear")
    if isinstance(bias, fx.Node):
        a.join(node, -1, bias, 0, "linear")


def _matmul(a: _Analysis, node: fx.Node) -> None:
    x, y = node.args[0], node.args[1]
    sx, sy, out = _shape(x), _shape(y), _shape(node)
    if len(sx) < 2 or len(sy) < 2:
        return a._unknown(node, "a vector matmul")
    a.join(x, -1, y, -2, "matmul")
    a.join(x, -2, node, -2, "matmul")
    a.join(y, -1, node, -1, "matmul")
    for operand, shape in ((x, sx), (y, sy)):
        for back in range(3, len(shape) + 1):
            if shape[-back] == out[-back]:
                a.join(operand, -back, node, -back, "matmul")


def _embedding(a: _Analysis, node: fx.Node) -> None:
    weight, ids = node.args[0], node.args[1]
    a.c.freeze(a.dim(weight, 0), "rows picked by token ids")
    for d in range(len(_shape(ids))):
        a.join(ids, d, node, d, "embedding")
    a.join(node, -1, weight, 1, "embedding")


def _conv(a: _Analysis, node: fx.Node) -> None:
    x, weight = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else None
    groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
    a.join(x, 0, node, 0, "conv")
    if groups == 1:
        a.join(x, 1, weight, 1, "conv")
    else:
        a.c.freeze(a.dim(x, 1), "a grouped convolution's input channels")
        a.c.freeze(a.dim(weight, 0), "a grouped convolution's channels")
    a.join(node, 1, weight, 0, "conv")
    if isinstance(bias, fx.Node):
        a.join(node, 1, bias, 0, "conv")
    for d in range(2, len(_shape(weight))):
        a.c.freeze(a.dim(weight, d), "a convolution kernel's positions")


def _batch_norm(a: _Analysis, node: fx.Node) -> None:
    x = node.args[0]
    for d in range(len(_shape(x))):
        a.join(x, d, node, d, "batch_norm")
    for p in node.args[1:5]:
        if isinstance(p, fx.Node):
            a.join(node, 1, p, 0, "batch_norm")


def _layer_norm(a: _Analysis, node: fx.Node) -> None:
    x, normalized = node.args[0], node.args[1]
    for d in range(len(_shape(x))):
        a.join(x, d, node, d, "layer_norm")
    for p in node.args[2:4]:
        if isinstance(p, fx.Node):
            for back in range(1, len(normalized) + 1):
                a.join(node, -back, p, -back, "layer_norm")


def _pool(a: _Analysis, node: fx.Node) -> None:
    x = node.args[0]
    a.join(x, 0, node, 0, "pool")
    a.join(x, 1, node, 1, "pool")


def _transpose(a: _Analysis, node: fx.Node) -> None:
    x = node.args[0]
    rank = len(_shape(x))
    i, j = node.args[1] % rank, node.args[2] % rank
    order = list(range(rank))
    order[i], order[j] = order[j], order[i]
    for out_d, in_d in enumerate(order):
        a.join(x, in_d, node, out_d, "transpose")


def _permute(a: _Analysis, node: fx.Node) -> None:
    x = node.args[0]
    rank = len(_shape(x))
    for out_d, in_d in enumerate(node.args[1]):
        a.join(x, in_d % rank, node, out_d, "permute")


def _unsqueeze(a: _Analysis, node: fx.Node) -> None:
    x = node.args[0]
    rank = len(_shape(node))
    new = node.args[1] % rank
    for in_d in range(len(_shape(x))):
        a.join(x, in_d, node, in_d + (in_d >= new), "unsqueeze")


def _reshape(a: _Analysis, node: fx.Node) -> None:
    """Groups of input and output dimensions whose products match; one dimension split into
    several (or several merged into one) is a Product, anything else is frozen."""
    x = node.args[0]
    src, dst = [d for d in range(len(_shape(x)))], [d for d in range(len(_shape(node)))]
    sizes_in, sizes_out = _shape(x), _shape(node)
    i = j = 0
    while i < len(src) or j < len(dst):
        if i < len(src) and sizes_in[i] == 1:
            i += 1
            continue
        if j < len(dst) and sizes_out[j] == 1:
            j += 1
            continue
        if i >= len(src) or j >= len(dst):
            break
        gi, gj, pi, pj = [i], [j], sizes_in[i], sizes_out[j]
        while pi != pj:
            if pi < pj:
                i += 1
                gi.append(i)
                pi *= sizes_in[i]
            else:
                j += 1
                gj.append(j)
                pj *= sizes_out[j]
        gi, gj = [d for d in gi if sizes_in[d] > 1], [d for d in gj if sizes_out[d] > 1]
        if len(gi) == 1 and len(gj) == 1:
            a.join(x, gi[0], node, gj[0], "reshape")
        elif len(gi) == 1:
            a.c.products.append((a.dim(x, gi[0]), tuple(a.dim(node, d) for d in gj)))
        elif len(gj) == 1:
            a.c.products.append((a.dim(node, gj[0]), tuple(a.dim(x, d) for d in gi)))
        else:
            for d in gi:
                a.c.freeze(a.dim(x, d), "a reshape that regroups several dimensions")
            for d in gj:
                a.c.freeze(a.dim(node, d), "a reshape that regroups several dimensions")
        i, j = i + 1, j + 1


def _flatten(a: _Analysis, node: fx.Node) -> None:
    _reshape(a, node)


def _expand(a: _Analysis, node: fx.Node) -> None:
    x, shape, out = node.args[0], _shape(node.args[0]), _shape(node)
    for back in range(1, len(shape) + 1):
        if shape[-back] == out[-back]:
            a.join(x, -back, node, -back, "expand")


def _repeat_interleave(a: _Analysis, node: fx.Node) -> None:
    x, repeats = node.args[0], node.args[1]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim")
    if not isinstance(repeats, int) or dim is None:
        return a._unknown(node, "repeat_interleave")
    rank = len(_shape(x))
    dim %= rank
    for d in range(rank):
        if d != dim:
            a.join(x, d, node, d, "repeat_interleave")
    copies = a.c.add((node.name, "copies"), repeats)
    a.c.products.append((a.dim(node, dim), (a.dim(x, dim), copies)))


def _slice(a: _Analysis, node: fx.Node) -> None:
    x, shape = node.args[0], _shape(node.args[0])
    dim = (node.args[1] if len(node.args) > 1 else 0) % len(shape)
    whole = _shape(node)[dim] == shape[dim]
    for d in range(len(shape)):
        if d != dim or whole:
            a.join(x, d, node, d, "slice")
    if not whole:
        a.c.freeze(a.dim(x, dim), "part of it is sliced out")
        a.c.freeze(a.dim(node, dim), "part of it is sliced out")


def _cat(a: _Analysis, node: fx.Node) -> None:
    tensors, rank = node.args[0], len(_shape(node))
    dim = (node.args[1] if len(node.args) > 1 else 0) % rank
    for t in tensors:
        for d in range(rank):
            if d != dim:
                a.join(t, d, node, d, "cat")
        a.c.freeze(a.dim(t, dim), "it is concatenated with other channels")
    a.c.freeze(a.dim(node, dim), "it is concatenated with other channels")


def _index(a: _Analysis, node: fx.Node) -> None:
    """x[None, ..., idx]: the dimensions indexed by nothing stay; the indexed one is frozen."""
    x, indices = node.args[0], node.args[1]
    lead = 0
    while lead < len(indices) and indices[lead] is None:
        lead += 1
    if len(indices) - lead != 1 or indices[lead] is None:
        return a._unknown(node, "advanced indexing")
    for d in range(lead):
        a.join(x, d, node, d, "index")
    for back in range(1, len(_shape(x)) - lead):
        a.join(x, -back, node, -back, "index")
    a.c.freeze(a.dim(x, lead), "it is indexed by a tensor")


def _index_put(a: _Analysis, node: fx.Node) -> None:
    """x[None, ..., idx] = values: x's dimensions are the result's; the indexed one is frozen."""
    x, indices, values = node.args[0], node.args[1], node.args[2]
    lead = 0
    while lead < len(indices) and indices[lead] is None:
        lead += 1
    if len(indices) - lead != 1 or indices[lead] is None:
        return a._unknown(node, "advanced indexing")
    for d in range(len(_shape(x))):
        a.join(x, d, node, d, "index_put")
    a.c.freeze(a.dim(x, lead), "it is indexed by a tensor")
    shape_v, index_rank = _shape(values), len(_shape(indices[lead]) or (1,))
    if shape_v is None:
        return
    # the values broadcast, from the right, against x[..., idx]: x's dims before the index, the
    # index's own dims, x's dims after it
    result = [("x", d) for d in range(lead)] + [("index", None)] * index_rank + [("x", d) for d in range(lead + 1, len(_shape(x)))]
    for back in range(1, min(len(shape_v), len(result)) + 1):
        kind, d = result[-back]
        if kind == "x":
            if shape_v[-back] == _shape(x)[d]:
                a.join(values, -back, x, d, "index_put")
        else:
            a.c.freeze(a.dim(values, -back), "it is indexed by a tensor")


def _sdpa(a: _Analysis, node: fx.Node) -> None:
    q, k, v = node.args[:3]
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    sq, sk = _shape(q), _shape(k)
    for d in range(len(sq) - 2):
        a.join(q, d, node, d, "attention")
        a.join(k, d, v, d, "attention")
        if sk[d] == sq[d]:
            a.join(k, d, q, d, "attention")
            a.join(v, d, q, d, "attention")
        else:  # grouped-query attention inside the op: heads of k and v stand for several of q's
            a.c.freeze(a.dim(q, d), "attention with fewer key heads than query heads")
            a.c.freeze(a.dim(k, d), "attention with fewer key heads than query heads")
    a.join(q, -2, node, -2, "attention")
    a.join(k, -2, v, -2, "attention")
    a.join(q, -1, k, -1, "attention")
    a.join(v, -1, node, -1, "attention")
    if isinstance(mask, fx.Node):
        sm = _shape(mask)
        for back in range(3, len(sm) + 1):
            if sm[-back] == sq[-back]:
                a.join(mask, -back, q, -back, "attention mask")
        a.join(mask, -2, q, -2, "attention mask")
        a.join(mask, -1, k, -2, "attention mask")


def _gather(a: _Analysis, node: fx.Node) -> None:
    a._unknown(node, "gather")


_HANDLERS = {
    aten.linear.default: _linear, aten.matmul.default: _matmul, aten.bmm.default: _matmul, aten.mm.default: _matmul,
    aten.embedding.default: _embedding, aten.conv2d.default: _conv, aten.conv1d.default: _conv, aten.batch_norm.default: _batch_norm,
    aten.layer_norm.default: _layer_norm, aten.max_pool2d.default: _pool, aten.adaptive_avg_pool2d.default: _pool, aten.avg_pool2d.default: _pool,
    aten.transpose.int: _transpose, aten.permute.default: _permute, aten.unsqueeze.default: _unsqueeze, aten.view.default: _reshape,
    aten.reshape.default: _reshape, aten._unsafe_view.default: _reshape, aten.flatten.using_ints: _flatten, aten.expand.default: _expand,
    aten.expand_as.default: _expand, aten.repeat_interleave.self_int: _repeat_interleave, aten.slice.Tensor: _slice, aten.cat.default: _cat,
    aten.index.Tensor: _index, aten.index_put_.default: _index_put, aten.index_put.default: _index_put,
    aten.scaled_dot_product_attention.default: _sdpa, aten.gather.default: _gather,
}


@dataclass
class Spaces:
    """Every channel space of a model with weights in it: `free` ones take any permutation."""

    spaces: dict[int, Space]
    heads: set[str] = field(default_factory=set)  # weights of layers whose outputs are the model's, through no other weighted op

    @property
    def free(self) -> list[Space]:
        return [s for s in self.spaces.values() if s.free and self._moves_weights(s)]

    def _moves_weights(self, space: Space) -> bool:
        return bool(space.axes) or any(self._moves_weights(self.spaces[c]) for c in space.part_of)

    def of_axis(self, name: str, dim: int) -> Space | None:
        for space in self.spaces.values():
            if Axis(name, dim) in space.axes:
                return space
        return None


def find_spaces(model: torch.nn.Module, example_inputs: tuple) -> Spaces:
    """The channel spaces of `model` on `example_inputs` (exported, never run in place)."""
    ep = torch.export.export(model, tuple(example_inputs), strict=False)
    analysis = _Analysis(ep)
    analysis.run()
    spaces = _resolve(analysis.c)
    spaces.heads = _heads(ep, analysis.weights)
    return spaces


WEIGHTED = {aten.linear.default, aten.matmul.default, aten.bmm.default, aten.mm.default, aten.conv1d.default, aten.conv2d.default,
            aten.layer_norm.default, aten.batch_norm.default, aten.embedding.default}


def _heads(ep: torch.export.ExportedProgram, weights: dict[str, str]) -> set[str]:
    """The weights of Linear layers whose outputs reach the model's outputs through no other
    weighted op (a classifier, an LM head)."""
    heads = set()
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is not aten.linear.default:
            continue
        frontier, seen = list(node.users), set()
        while frontier:
            user = frontier.pop()
            if user in seen:
                continue
            seen.add(user)
            if user.op == "output":
                heads.add(weights.get(node.args[1].name, node.args[1].name))
                break
            if user.target not in WEIGHTED:
                frontier.extend(user.users)
    return heads


def _unify_products(c: _Classes) -> None:
    """Two ways of splitting one class into parts of the same sizes are one way: their parts are
    joined (a key and a value projection's heads, both repeated to the query heads)."""
    changed = True
    while changed:
        changed = False
        seen: dict[tuple, tuple[DimKey, ...]] = {}
        for whole, parts in c.products:
            key = (c.find(whole), tuple(c.size[c.find(p)] for p in parts))
            first = seen.setdefault(key, parts)
            for p, q in zip(first, parts):
                if c.find(p) != c.find(q):
                    c.union(p, q, "one split of a dimension")
                    changed = True


def _resolve(c: _Classes) -> Spaces:
    _unify_products(c)
    roots = {c.find(k) for k in c.parent}
    ids = {root: i for i, root in enumerate(sorted(roots, key=str))}
    spaces = {ids[r]: Space(ids[r], c.size[r], frozen=list(c.frozen.get(r, []))) for r in roots}
    for key in c.parent:
        if key[0] == "param":
            spaces[ids[c.find(key)]].axes.append(Axis(key[1], key[2]))
    factorizations: dict[int, set[tuple[int, ...]]] = {}
    for whole, parts in c.products:
        factorizations.setdefault(ids[c.find(whole)], set()).add(tuple(ids[c.find(p)] for p in parts))
    for whole, options in factorizations.items():
        space = spaces[whole]
        if len(options) > 1 or any(whole in parts for parts in options):
            space.frozen.append("it is split into heads in two different ways")
            for parts in options:
                for p in parts:
                    spaces[p].frozen.append(f"space {whole} is split into heads in two different ways")
            continue
        space.factors = next(iter(options))
        for p in space.factors:
            spaces[p].part_of.append(whole)
    _freeze_factors_of_frozen(spaces)
    return Spaces({i: s for i, s in spaces.items() if s.size > 1})


def _freeze_factors_of_frozen(spaces: dict[int, Space]) -> None:
    """A frozen composite freezes its factors: moving a head moves its channels."""
    changed = True
    while changed:
        changed = False
        for space in spaces.values():
            if space.frozen and space.factors:
                for p in space.factors:
                    reason = f"it is part of space {space.id}, which cannot move ({space.frozen[0]})"
                    if not spaces[p].frozen:
                        spaces[p].frozen.append(reason)
                        changed = True

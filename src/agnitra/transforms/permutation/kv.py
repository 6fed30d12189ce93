"""KV-cache compression as a layout step (`kv:int8[:gN]`, `kv:int4[:gN]`, `kv:prune:F`) on our
Llama decoders, and the function-preserving permutation of each key/value head's channels that
it is ordered by.

- `refusal`: why a model cannot take the step ('' where it can): our `models.llama.Attention`
  with a static KV cache only (a transformers decoder keeps its cache in its own Cache objects).
- `capture`: each attention layer's queries, keys and values as the cache sees them (keys and
  queries after RoPE) on calibration inputs.
- `solve_kv` / `permute_kv`: per key head, an order of its channel pairs (RoPE rotates channels c
  and c + D/2 together, so a pair moves as one: the same permutation in both halves) applied to
  W_k's rows, to the rows of W_q of every query head that reads it, and to the rotary frequencies
  of those pairs (`Attention.rope_order`): q.k is unchanged. Per value head, an order of its
  channels applied to W_v's rows and to the output projection's input columns of every query
  head that reads it. The solver's cost is `kv_costs.KVGroupQuant`; the orders are applied only
  once the outputs are shown unchanged (`order.permute_checked`).
- `install`: a `models.kv_cache.CompressedKVCache` of the step's format on each attention layer
  (`Attention.kv_format`, kept by `setup_caches`); pruning keeps, per layer and head, the key
  pairs of most |q_c| |k_c| and the value channels of most |v_c| x the output projection's column
  norm, on the calibration inputs."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from agnitra.models.kv_cache import KVFormat, cache_bytes, geometry, reconstruct
from agnitra.models.llama import Attention, KVCache, StackedQKVAttention
from agnitra.transforms.permutation.costs import InUnits
from agnitra.transforms.permutation.kv_costs import KVGroupQuant
from agnitra.transforms.permutation.order import calibration_pass, permute_checked
from agnitra.transforms.permutation.solver import solve
from agnitra.transforms.permutation.spaces import Axis, Space, Spaces
from agnitra.transforms.permutation.steps import StateStep


def attentions(model: nn.Module) -> dict[str, Attention]:
    return {name: m for name, m in model.named_modules() if isinstance(m, Attention) and m.kv_cache is not None}


def refusal(model: nn.Module, step: StateStep | None = None) -> str:
    """Why the KV step cannot apply to `model` (one line), '' where it can."""
    found = attentions(model)
    stacked = [name for name, m in found.items() if isinstance(m, StackedQKVAttention)]
    if stacked:
        return f"its attention {stacked[0]} has q|k|v stacked in one Linear (the KV step orders W_q and W_k rows of the plain Attention)"
    if not found:
        if any(type(m).__module__.startswith("transformers.") for m in model.modules()):
            return (f"a transformers model ({type(model).__name__}): its KV cache is transformers' own Cache object, which the compressed cache "
                    "does not replace; KV-cache compression covers Agnitra's Llama decoders (zoo:tinylm-py, zoo:llama-*, gen:lm-*)")
        return "no attention layer of Agnitra's Llama (models.llama.Attention) with a static KV cache to compress"
    head_dim = next(iter(found.values())).head_dim
    if head_dim % 2:
        return f"head size {head_dim} is odd (RoPE pairs channels)"
    if step is not None and step.bits and step.group and head_dim % step.group:
        sizes = ", ".join(f"g{g}" for g in range(2, head_dim + 1) if head_dim % g == 0 and g % 2 == 0)
        return f"groups of {step.group} do not divide the head size {head_dim}; use one of {sizes}"
    return ""


@dataclass
class Captured:
    q: torch.Tensor  # [tokens, H, D] after RoPE
    k: torch.Tensor  # [tokens, H_kv, D] after RoPE, as the cache holds them
    v: torch.Tensor  # [tokens, H_kv, D]


def capture(model: nn.Module, calibration: list[tuple], tokens: int = 1024) -> dict[str, Captured]:
    """Each attention layer's q, k, v on the calibration inputs (at most `tokens` evenly spread)."""
    found = attentions(model)
    seen: dict[str, list[tuple]] = {name: [] for name in found}

    def recorder(name: str):
        def record(module, args):
            x, cos, sin = args[:3]
            q, k, v = module.project_qkv(x)
            q, k = module.rotary(q, k, cos, sin)
            seen[name].append(tuple(t.detach().float().reshape(-1, t.shape[-2], t.shape[-1]).cpu() for t in (q, k, v)))
        return record

    calibration_pass(model, calibration, {module: recorder(name) for name, module in found.items()})
    captured = {}
    for name, parts in seen.items():
        q, k, v = (torch.cat([p[i] for p in parts]) for i in range(3))
        pick = torch.linspace(0, q.shape[0] - 1, min(tokens, q.shape[0])).round().long()
        captured[name] = Captured(q[pick], k[pick], v[pick])
    return captured


def error_weights(module: Attention, data: Captured) -> tuple[torch.Tensor, torch.Tensor]:
    """[H_kv, D] each: what an error in a key channel costs (the energy of the queries that
    multiply it, summed over the query heads reading the key head) and in a value channel (the
    squared norm of the output projection's columns it feeds, summed likewise)."""
    groups = module.n_heads // module.n_kv_heads
    q_energy = (data.q**2).mean(0)  # [H, D]
    key = q_energy.reshape(module.n_kv_heads, groups, -1).sum(1)
    columns = (module.wo.weight.detach().float().cpu() ** 2).sum(0).reshape(module.n_heads, -1)  # [H, D]
    value = columns.reshape(module.n_kv_heads, groups, -1).sum(1)
    return key, value


def importance(module: Attention, data: Captured) -> tuple[torch.Tensor, torch.Tensor]:
    """Pruning's importance: [H_kv, D/2] of each key pair (|q_c| |k_c| summed over the pair, as
    RMS over the calibration tokens) and [H_kv, D] of each value channel (|v_c| x its columns' norm)."""
    key_w, value_w = error_weights(module, data)
    key = key_w.sqrt() * (data.k**2).mean(0).sqrt()
    half = key.shape[1] // 2
    return key[:, :half] + key[:, half:], value_w.sqrt() * (data.v**2).mean(0).sqrt()


@dataclass
class KVOrders:
    chosen: dict[int, torch.Tensor] = field(default_factory=dict)
    spaces: Spaces = field(default_factory=lambda: Spaces({}))
    gain: float = 0.0
    heads: int = 0  # key and value heads whose order changed
    notes: list[str] = field(default_factory=list)


def ordered_parts(step: StateStep, head_dim: int) -> tuple[bool, bool]:
    """(keys, values): whether the order of a head's channels changes what the step loses: one
    scale over a group smaller than the head (for keys, a group of pairs within a half)."""
    if not step.bits or not step.group or step.group >= head_dim:
        return False, False
    return (head_dim // 2) % step.group == 0, head_dim % step.group == 0


def solve_kv(model: nn.Module, captured: dict[str, Captured], step: StateStep, unit: int, seconds: float, seed: int = 0) -> KVOrders:
    """Each key and value head's channel order of least `KVGroupQuant` cost, moving whole units of
    `unit` channels (pairs for keys) that an earlier weight step fixed."""
    result = KVOrders()
    found = attentions(model)
    head_dim = next(iter(found.values())).head_dim
    keys, values = ordered_parts(step, head_dim)
    if not keys:
        result.notes.append(f"{step.text}: key channels not ordered: groups of {step.group} are not within a half of the head ({head_dim // 2} channel pairs)"
                            if step.group and step.group < head_dim else f"{step.text}: one scale a head: the channels' order changes nothing")
    if not values:
        return result
    problems = [(name, kind, head) for name in found for kind in (("k", "v") if keys else ("v",)) for head in range(found[name].n_kv_heads)]
    each = seconds / len(problems)
    before = after = 0.0
    orders: dict[tuple[str, str], dict[int, torch.Tensor]] = {}
    for name, kind, head in problems:
        module, data = found[name], captured[name]
        key_w, value_w = error_weights(module, data)
        acts, weights = (data.k[:, head], key_w[head]) if kind == "k" else (data.v[:, head], value_w[head])
        cost = KVGroupQuant(acts, weights, step.group, step.bits, paired=kind == "k")
        if unit > 1:
            if cost.channels % unit or step.group % unit:
                result.notes.append(f"{step.text}: not permuted: its groups of {step.group} would break the groups of {unit} the earlier steps fixed")
                return KVOrders(notes=result.notes)
            cost = InUnits(cost, unit)
        solution = solve(cost, seconds=each, seed=seed)
        before += solution.identity_cost
        if solution.cost < solution.identity_cost:
            after += solution.cost
            orders.setdefault((name, kind), {})[head] = cost.channel_order(solution.order) if unit > 1 else solution.order
        else:
            after += solution.identity_cost
    result.gain = 1 - after / before if before > 0 else 0.0
    result.heads = sum(len(v) for v in orders.values())
    result.spaces, result.chosen = _spaces(found, orders)
    return result


def _spaces(found: dict[str, Attention], orders: dict[tuple[str, str], dict[int, torch.Tensor]]) -> tuple[Spaces, dict[int, torch.Tensor]]:
    """The chosen per-head orders as whole-axis orders of the weights they move, each axis its
    own space (`apply.permute_weights` moves them)."""
    spaces, chosen = {}, {}

    def add(name: str, dim: int, order: torch.Tensor) -> None:
        space = Space(len(spaces), order.numel(), axes=[Axis(name, dim)])
        spaces[space.id], chosen[space.id] = space, order

    for (layer, kind), heads in orders.items():
        module = found[layer]
        d, groups = module.head_dim, module.n_heads // module.n_kv_heads
        unit = d // 2 if kind == "k" else d
        per_head = [heads.get(j, torch.arange(unit)) for j in range(module.n_kv_heads)]
        if kind == "k":  # a pair order in both halves of each head's rows
            rows = lambda h, o: torch.cat([h * d + o, h * d + d // 2 + o])  # noqa: E731
            add(f"{layer}.wk.weight", 0, torch.cat([rows(j, per_head[j]) for j in range(module.n_kv_heads)]))
            add(f"{layer}.wq.weight", 0, torch.cat([rows(h, per_head[h // groups]) for h in range(module.n_heads)]))
            add(f"{layer}.rope_order", 0, torch.cat([j * unit + per_head[j] for j in range(module.n_kv_heads)]))
        else:
            add(f"{layer}.wv.weight", 0, torch.cat([j * d + per_head[j] for j in range(module.n_kv_heads)]))
            add(f"{layer}.wo.weight", 1, torch.cat([h * d + per_head[h // groups] for h in range(module.n_heads)]))
    return Spaces(spaces), chosen


def permute_kv(model: nn.Module, orders: KVOrders, checks: list[tuple]) -> str:
    """The orders applied once the outputs on `checks` are shown unchanged ('' then), else why not
    (the model as it was)."""
    if not orders.chosen:
        return ""
    found = attentions(model)
    added = []
    for space in orders.spaces.spaces.values():
        layer, _, attr = space.axes[0].name.rpartition(".")
        module = found.get(layer)
        if attr == "rope_order" and module.rope_order is None:
            module.rope_order = torch.arange(module.head_dim // 2, device=module.wq.weight.device).repeat(module.n_kv_heads)  # each head's pair -> its frequency
            added.append(module)
    why_not = permute_checked(model, orders.spaces, orders.chosen, checks)
    if why_not:
        for module in added:
            module.rope_order = None
    return why_not


@dataclass
class Installed:
    bytes_before: int | None
    bytes_after: int | None
    error: float  # over the captured keys and values, weighted by `error_weights`: ||x' - x|| / ||x||
    kept: float  # pruning: the share of `importance` kept (1 without pruning)
    notes: list[str] = field(default_factory=list)


def install(model: nn.Module, step: StateStep, captured: dict[str, Captured]) -> Installed:
    """The step's format on each attention layer's cache (a fresh compressed cache of the same
    geometry), with what it costs on the captured keys and values."""
    found = attentions(model)
    before = cache_bytes(model)
    notes: list[str] = []
    err_num = err_den = kept_num = kept_den = 0.0
    formats = {}
    for name, module in found.items():
        fmt = module.kv_format or KVFormat()
        data = captured[name]
        if step.bits:
            if fmt.bits:
                notes.append(f"{step.text}: replaces the cache's int{fmt.bits} codes")
            fmt = replace(fmt, bits=step.bits, group=step.group)
        else:
            if fmt.k_keep is not None:
                return Installed(before, before, 0.0, 1.0, [f"{step.text}: refused: the cache's channels are already pruned"])
            key_imp, value_imp = importance(module, data)
            pairs = max(1, round(step.density * key_imp.shape[1]))
            channels = max(1, round(step.density * value_imp.shape[1]))
            k_pairs = key_imp.topk(pairs, dim=1).indices.sort(dim=1).values
            half = module.head_dim // 2
            fmt = replace(fmt, k_keep=torch.cat([k_pairs, k_pairs + half], 1), v_keep=value_imp.topk(channels, dim=1).indices.sort(dim=1).values)
            kept_num += float(key_imp.gather(1, k_pairs).sum() + value_imp.gather(1, fmt.v_keep).sum())
            kept_den += float(key_imp.sum() + value_imp.sum())
        for keep, what in ((fmt.k_keep, "key"), (fmt.v_keep, "value")):
            stored = keep.shape[1] if keep is not None else module.head_dim
            if fmt.bits and (stored % (fmt.group or stored) or (fmt.bits == 4 and stored % 2)):
                return Installed(before, before, 0.0, 1.0, [f"{step.text}: refused: groups of {fmt.group} do not divide the {stored} {what} channels a head stores"])
        formats[name] = fmt
        key_w, value_w = error_weights(module, data)
        for x, keep, w in ((data.k, fmt.k_keep, key_w), (data.v, fmt.v_keep, value_w)):
            x4 = x.transpose(0, 1)[None]  # [1, H_kv, tokens, D]
            got = reconstruct(x4, keep, fmt.bits, fmt.group)
            err_num += float((((got - x4) ** 2) * w[None, :, None, :]).sum())
            err_den += float(((x4**2) * w[None, :, None, :]).sum())
    for name, module in found.items():
        shape, dtype, device = geometry(module.kv_cache)
        module.kv_format = formats[name]
        module.kv_cache = formats[name].make_cache(*shape, dtype, device)
    fmt = next(iter(formats.values()))
    notes.append(f"{step.text}: the KV cache held as {fmt.describe()}; read back dequantized for the attention")
    return Installed(before, cache_bytes(model), (err_num / err_den) ** 0.5 if err_den else 0.0, kept_num / kept_den if kept_den else 1.0, notes)


@contextmanager
def plain_caches(model: nn.Module):
    """The model with plain caches of the same geometry in place of compressed ones, then fresh
    compressed ones again: a later weight step's permutation is checked on the function it must
    preserve, not on a cache's rounding, which float reassociation may tip at a code's edge."""
    compressed = {name: m for name, m in attentions(model).items() if m.kv_format is not None}
    saved = {}
    for name, module in compressed.items():
        shape, dtype, device = geometry(module.kv_cache)
        saved[name] = module.kv_format
        module.kv_format, module.kv_cache = None, KVCache(*shape, dtype, device)
    try:
        yield
    finally:
        for name, module in compressed.items():
            shape, dtype, device = geometry(module.kv_cache)
            module.kv_format = saved[name]
            module.kv_cache = saved[name].make_cache(*shape, dtype, device)

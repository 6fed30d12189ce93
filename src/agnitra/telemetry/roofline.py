"""The physical floor of a unit of work: max(FLOPs ÷ matmul FLOP/s, bytes ÷ copy bandwidth).

Bytes are compulsory bytes: every weight read once (embedding tables only for the rows looked
up), the inputs and outputs, and for a decode step the KV cache positions attended to. Measured
ceilings come from `telemetry.ceilings`, never datasheets.
"""

from __future__ import annotations

import torch
from torch import nn

from agnitra.results import Roofline
from agnitra.telemetry.ceilings import matmul_peak
from agnitra.telemetry.opcount import unique_bytes


def _tensors(tree) -> list[torch.Tensor]:
    if hasattr(tree, "to_tuple") and callable(tree.to_tuple):
        tree = tree.to_tuple()
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _token_count(inputs) -> int:
    ints = [t for t in _tensors(inputs) if not t.is_floating_point() and t.dim() >= 2]
    return max((t.numel() for t in ints), default=0)


def weight_bytes(model: nn.Module, tokens_looked_up: int) -> int:
    """Parameters and persistent buffers, embedding tables counted by the rows gathered."""
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    total = 0
    for p in model.parameters():
        if id(p) in embedding_weights:
            rows = min(tokens_looked_up, p.shape[0])
            total += rows * p.shape[1] * p.element_size()
        else:
            total += p.numel() * p.element_size()
    persistent = dict(model.named_buffers(remove_duplicate=True))
    for name, module in model.named_modules():
        for b in getattr(module, "_non_persistent_buffers_set", ()):
            persistent.pop(f"{name}.{b}" if name else b, None)
    return total + sum(b.numel() * b.element_size() for b in persistent.values())


def kv_cache_bytes(model: nn.Module, positions: float) -> float:
    """Bytes of KV cache a decode step reads at `positions` filled slots (our Llama's KVCache)."""
    total = 0.0
    for m in model.modules():
        k = getattr(m, "k_cache", None)
        if isinstance(k, torch.Tensor) and k.dim() == 4:
            batch, heads, _, dim = k.shape
            total += 2 * batch * heads * positions * dim * k.element_size()
    return total


def compulsory_bytes(model: nn.Module, inputs, outputs, kv_positions: float = 0.0) -> float:
    io = sum(unique_bytes(t) for t in _tensors(inputs)) + sum(unique_bytes(t) for t in _tensors(outputs))
    return weight_bytes(model, _token_count(inputs)) + io + kv_cache_bytes(model, kv_positions)


def roofline(flops: float, nbytes: float, ceilings: dict, dtype: torch.dtype, notes: str = "") -> Roofline | None:
    peak = matmul_peak(ceilings, dtype)
    bandwidth = ceilings.get("copy_gbps")
    if not peak or not bandwidth:
        return None
    compute_s, memory_s = flops / peak, nbytes / (bandwidth * 1e9)
    return Roofline(
        flops=flops,
        bytes=nbytes,
        floor_ms=max(compute_s, memory_s) * 1e3,
        bound="compute" if compute_s >= memory_s else "memory",
        dtype=str(dtype).replace("torch.", ""),
        notes=notes,
    )

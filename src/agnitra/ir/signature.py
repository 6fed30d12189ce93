"""The workload signature: a fixed-length, versioned feature vector of a captured graph.

What the cost model, the search and recipe reuse key on. The vector (`names`, `values`) names
the workload, not the moment: operator mix (counts and FLOP shares per kind), sizes (log-scaled
parameters, FLOPs, bytes, intensity), shape statistics of the compute nodes, and spectral
features of the graph of compute operators (the 8 largest eigenvalues of its normalised
Laplacian and an 8-bin histogram of all of them, which does not depend on depth); every feature
is scaled to about [0, 1] so Euclidean distance is meaningful, and it is identical for a model
and its inputs on every run. Measured time shares per kind move with the machine's load (0.54
to 0.71 for one kind of `zoo:tinylm` between two runs on a busy machine), so they are kept apart
in `measured`, named `time_share.KIND`, empty when untimed, and never part of the distance.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from agnitra.ir.graph import KINDS, GraphIR

SIGNATURE_VERSION = "agnitra.signature/2"  # /2: time shares moved out of the vector into `measured`
COMPUTE_KINDS = ("matmul", "conv", "attention", "norm", "softmax", "embedding", "reduction")
SPECTRAL_K = 8
DENSE_EIG_LIMIT = 3000  # compute-graph nodes; larger graphs use a sparse solver


@dataclass
class Signature:
    version: str
    names: list[str]
    values: list[float]
    measured: dict[str, float] = field(default_factory=dict)  # time_share.KIND: measurements, not identity

    def vector(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64)

    def distance(self, other: "Signature") -> float:
        if other.version != self.version:
            raise ValueError(f"signatures of different versions: {self.version} vs {other.version}")
        return float(np.linalg.norm(self.vector() - other.vector()))

    def to_dict(self) -> dict:
        return {"version": self.version, "names": self.names, "values": self.values, "measured": self.measured}


def _log_scaled(x: float, decades: float) -> float:
    """log10(1 + x) / decades: sizes spanning `decades` orders of magnitude land in [0, 1]."""
    return math.log10(1.0 + max(x, 0.0)) / decades


def _mix_features(ir: GraphIR) -> dict[str, float]:
    n = len(ir.nodes) or 1
    flops = ir.total_flops or 1.0
    counts, flop_share = defaultdict(float), defaultdict(float)
    for node in ir.nodes:
        counts[node.kind] += 1 / n
        flop_share[node.kind] += node.flops / flops
    out = {}
    for kind in KINDS:
        out[f"count_share.{kind}"] = counts[kind]
        out[f"flops_share.{kind}"] = flop_share[kind]
    return out


def time_shares(ir: GraphIR) -> dict[str, float]:
    """The hotspot features of a timed IR: measured time share per op kind (`time_share.KIND`) and,
    on a GPU, the share of the step the device was busy (`device_busy_share`: low for a step that
    launches more than it computes, where CUDA graphs pay); empty when the IR is untimed."""
    timed_total = sum(node.time_us or 0.0 for node in ir.nodes)
    if not timed_total:
        return {}
    shares = defaultdict(float)
    for node in ir.nodes:
        shares[node.kind] += (node.time_us or 0.0) / timed_total
    out = {f"time_share.{kind}": round(shares[kind], 9) for kind in KINDS}
    timing = ir.timing or {}
    if timing.get("device_busy_ms") is not None and timing.get("measured_ms"):
        out["device_busy_share"] = round(min(2.0, timing["device_busy_ms"] / timing["measured_ms"]), 9)
    return out


def _size_features(ir: GraphIR) -> dict[str, float]:
    flops, nbytes = ir.total_flops, ir.total_bytes
    return {
        "log_nodes": _log_scaled(len(ir.nodes), 5),
        "log_params": _log_scaled(ir.params, 12),
        "log_param_bytes": _log_scaled(ir.param_bytes, 12),
        "log_flops": _log_scaled(flops, 15),
        "log_bytes": _log_scaled(nbytes, 12),
        "log_intensity": _log_scaled(flops / nbytes if nbytes else 0.0, 4),
    }


def _shape_features(ir: GraphIR) -> dict[str, float]:
    compute = [n for n in ir.nodes if n.kind in COMPUTE_KINDS and n.output_shapes]
    products = [n for n in ir.nodes if n.kind in ("matmul", "attention") and n.input_shapes and n.input_shapes[0]]
    out_sizes = [math.log2(1 + math.prod(n.output_shapes[0])) for n in compute]
    ks = [math.log2(1 + n.input_shapes[0][-1]) for n in products]
    ns = [math.log2(1 + n.output_shapes[0][-1]) for n in products if n.output_shapes and n.output_shapes[0]]
    return {
        "max_log2_output": (max(out_sizes) if out_sizes else 0.0) / 40,
        "mean_log2_output": (float(np.mean(out_sizes)) if out_sizes else 0.0) / 40,
        "mean_log2_k": (float(np.mean(ks)) if ks else 0.0) / 20,
        "mean_log2_n": (float(np.mean(ns)) if ns else 0.0) / 20,
        "rank4_share": (sum(len(n.output_shapes[0]) >= 4 for n in compute) / len(compute)) if compute else 0.0,
        "weight_input_share": (sum(n.weight_input for n in compute) / len(compute)) if compute else 0.0,
    }


def compute_graph(ir: GraphIR) -> tuple[list[str], set[tuple[int, int]]]:
    """Compute operators and the data paths between them (through any non-compute nodes)."""
    by_name = ir.by_name()
    compute = [n.name for n in ir.nodes if n.kind in COMPUTE_KINDS]
    index = {name: i for i, name in enumerate(compute)}
    consumers: dict[str, list[str]] = defaultdict(list)
    for n in ir.nodes:
        for src in n.inputs:
            if src in by_name:
                consumers[src].append(n.name)
    edges: set[tuple[int, int]] = set()
    for name in compute:
        frontier, seen = list(consumers[name]), set()
        while frontier:
            nxt = frontier.pop()
            if nxt in seen:
                continue
            seen.add(nxt)
            if nxt in index:
                edges.add((index[name], index[nxt]))
            else:
                frontier.extend(consumers[nxt])
    return compute, edges


def normalized_laplacian_spectrum(n: int, edges: set[tuple[int, int]]) -> np.ndarray:
    """Eigenvalues (ascending, in [0, 2]) of I - D^-1/2 A D^-1/2 of the undirected graph."""
    if n == 0:
        return np.zeros(0)
    import scipy.sparse as sp

    rows = [i for i, j in edges if i != j] + [j for i, j in edges if i != j]
    cols = [j for i, j in edges if i != j] + [i for i, j in edges if i != j]
    adjacency = sp.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()
    adjacency.data[:] = 1.0  # duplicate edges count once
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    inv_sqrt = np.where(degree > 0, 1.0 / np.sqrt(np.maximum(degree, 1e-12)), 0.0)
    norm_adj = sp.diags(inv_sqrt) @ adjacency @ sp.diags(inv_sqrt)
    laplacian = sp.eye(n) - norm_adj
    laplacian = sp.diags((degree > 0).astype(float)) @ laplacian  # isolated nodes: eigenvalue 0
    if n <= DENSE_EIG_LIMIT:
        return np.clip(np.linalg.eigvalsh(laplacian.toarray()), 0.0, 2.0)
    from scipy.sparse.linalg import eigsh

    k = min(2 * SPECTRAL_K, n - 2)
    largest = eigsh(laplacian, k=k, which="LA", v0=np.ones(n), return_eigenvectors=False)
    return np.clip(np.sort(largest), 0.0, 2.0)


def _spectral_features(ir: GraphIR) -> dict[str, float]:
    compute, edges = compute_graph(ir)
    eig = normalized_laplacian_spectrum(len(compute), edges)
    top = np.sort(eig)[::-1][:SPECTRAL_K]
    top = np.pad(top, (0, SPECTRAL_K - len(top)))
    hist = np.histogram(eig, bins=SPECTRAL_K, range=(0.0, 2.0))[0] / max(len(eig), 1)
    out = {f"laplacian_top.{i}": float(v) / 2.0 for i, v in enumerate(top)}
    out.update({f"laplacian_hist.{i}": float(v) for i, v in enumerate(hist)})
    return out


def signature(ir: GraphIR) -> Signature:
    features: dict[str, float] = {}
    for part in (_mix_features, _size_features, _shape_features, _spectral_features):
        features.update(part(ir))
    names = list(features)
    return Signature(SIGNATURE_VERSION, names, [round(float(features[k]), 9) for k in names], time_shares(ir))

"""The order of a space's channels that a state transform loses least on (`solve`).

1. A similarity graph over the channels: the correlation of their activations on calibration
   inputs where given (channels used together), else of their weight magnitudes across rows;
   each channel keeps its `neighbours` strongest links (a sparse graph).
2. Seeds: the spectral order (the Fiedler vector of the graph's normalised Laplacian, scipy's
   sparse eigensolver) puts similar channels next to each other, which suits a shared scale;
   Louvain communities (networkx) dealt round-robin into the groups put dissimilar channels
   together, which suits keeping 2 of 4; channels sorted by their largest weight share a range.
   The cheapest seed (the identity among them) starts the search.
3. Local search on C(pi): batches of random swaps between groups scored at once, the improving
   ones that touch distinct groups applied, and after a run without improvement a few bounded
   regressions (swaps costing at most `regression` of the current cost) to leave a local minimum;
   the best order seen is kept and returned when the time cap ends the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from agnitra.transforms.permutation.costs import total_cost


@dataclass
class Solution:
    order: torch.Tensor  # the channels in their new order (a permutation of range(D))
    cost: float
    identity_cost: float
    seed: str  # which start the search improved on
    seconds: float
    swaps: int
    history: list[tuple[float, float]] = field(default_factory=list)  # (seconds, best cost) as it improved

    @property
    def gain(self) -> float:
        """The share of the identity order's cost the solution removes."""
        return 1 - self.cost / self.identity_cost if self.identity_cost > 0 else 0.0


def similarity_graph(importance: torch.Tensor, activations: torch.Tensor | None = None, neighbours: int = 10):
    """A sparse symmetric graph (scipy CSR) of each channel's strongest correlations."""
    import scipy.sparse as sp

    data = activations if activations is not None else importance
    x = data.float() - data.float().mean(0, keepdim=True)
    x = x / x.norm(dim=0, keepdim=True).clamp_min(1e-12)
    corr = (x.T @ x).abs()
    corr.fill_diagonal_(0)
    k = min(neighbours, corr.shape[0] - 1)
    values, index = corr.topk(k, dim=1)
    rows = np.repeat(np.arange(corr.shape[0]), k)
    graph = sp.csr_matrix((values.reshape(-1).numpy(), (rows, index.reshape(-1).numpy())), shape=corr.shape)
    return graph.maximum(graph.T)


def spectral_order(graph) -> torch.Tensor:
    """Channels sorted by the Fiedler vector of the normalised Laplacian."""
    import scipy.sparse.csgraph as csgraph
    import scipy.sparse.linalg as sla

    laplacian = csgraph.laplacian(graph, normed=True)
    try:
        _, vectors = sla.eigsh(laplacian, k=2, sigma=-1e-3, which="LM", tol=1e-4, maxiter=2000)
    except Exception:  # noqa: BLE001 - no convergence: the plain smallest eigenpairs
        _, vectors = sla.eigsh(laplacian, k=2, which="SM", tol=1e-3, maxiter=5000)
    return torch.from_numpy(np.argsort(vectors[:, 1], kind="stable").copy())


def community_order(graph, group: int, seed: int = 0) -> torch.Tensor:
    """Louvain communities dealt round-robin over the groups: each group's channels come from
    as many different communities as there are."""
    import networkx as nx

    communities = nx.community.louvain_communities(nx.from_scipy_sparse_array(graph), seed=seed)
    members = [c for community in sorted(communities, key=len, reverse=True) for c in sorted(community)]
    n_groups = len(members) // group
    slots = [[] for _ in range(n_groups)]
    for i, channel in enumerate(members):
        slots[i % n_groups].append(channel)
    return torch.tensor([c for slot in slots for c in slot], dtype=torch.long)


def solve(cost, *, activations: torch.Tensor | None = None, seconds: float = 60.0, batch: int = 512,
          regression: float = 1e-4, seed: int = 0) -> Solution:
    """The channel order of least C(pi) found within `seconds` (the best one seen is kept);
    `activations` [samples, channels]: the space's activations on calibration inputs, whose
    correlations make the similarity graph (else the importance's)."""
    started = time.monotonic()
    importance, channels, group = cost.importance, cost.channels, cost.group
    if channels % group:
        raise ValueError(f"{channels} channels do not split into groups of {group}")
    identity = torch.arange(channels)
    identity_cost = total_cost(cost, identity)
    graph = similarity_graph(importance, activations)
    seeds = {"identity": identity, "spectral": spectral_order(graph), "communities": community_order(graph, group, seed),
             "magnitude": torch.argsort(importance.amax(0), stable=True)}
    costs = {name: total_cost(cost, order) for name, order in seeds.items()}
    start = min(costs, key=costs.get)
    order, swaps, history = _local_search(cost, seeds[start].clone(), started + seconds, batch, regression, seed, started)
    final = total_cost(cost, order)
    return Solution(order, final, identity_cost, start, time.monotonic() - started, swaps, history)


def _local_search(cost, order, deadline, batch, regression, seed, started):
    group = cost.group
    n_groups = order.numel() // group
    generator = torch.Generator().manual_seed(seed)
    groups = order.reshape(n_groups, group).clone()
    scores = cost.group_costs(groups)
    best, best_cost = groups.clone(), float(scores.sum())
    history, swaps, idle = [(time.monotonic() - started, best_cost)], 0, 0
    if n_groups < 2:
        return order, 0, history
    while time.monotonic() < deadline:
        ga = torch.randint(n_groups, (batch,), generator=generator)
        gb = (ga + torch.randint(1, n_groups, (batch,), generator=generator)) % n_groups
        ia, ib = torch.randint(group, (batch,), generator=generator), torch.randint(group, (batch,), generator=generator)
        new_a, new_b = groups[ga].clone(), groups[gb].clone()
        rows = torch.arange(batch)
        new_a[rows, ia], new_b[rows, ib] = groups[gb, ib], groups[ga, ia]
        delta = cost.group_costs(new_a) + cost.group_costs(new_b) - scores[ga] - scores[gb]
        current = float(scores.sum())
        allowed = delta < -1e-12 * max(current, 1e-30) if idle < 20 else delta < regression * current
        chosen = _distinct(ga, gb, delta, allowed, limit=batch if idle < 20 else 2)
        for i in chosen:
            a, b = int(ga[i]), int(gb[i])
            groups[a], groups[b] = new_a[i], new_b[i]
        if chosen:
            touched = torch.tensor(sorted({int(ga[i]) for i in chosen} | {int(gb[i]) for i in chosen}))
            scores[touched] = cost.group_costs(groups[touched])
            swaps += len(chosen)
        total = float(scores.sum())
        if total < best_cost - 1e-12 * abs(best_cost):
            best, best_cost, idle = groups.clone(), total, 0
            history.append((time.monotonic() - started, best_cost))
        else:
            idle = idle + 1 if idle < 20 else 0  # after a few bounded regressions, back to improving
    return best.reshape(-1), swaps, history


def _distinct(ga: torch.Tensor, gb: torch.Tensor, delta: torch.Tensor, allowed: torch.Tensor, limit: int) -> list[int]:
    """The allowed swaps, best first, that touch groups no earlier one touched (they apply together)."""
    used: set[int] = set()
    chosen = []
    for i in torch.argsort(delta).tolist():
        if not bool(allowed[i]) or len(chosen) >= limit:
            break
        a, b = int(ga[i]), int(gb[i])
        if a in used or b in used:
            continue
        used.update((a, b))
        chosen.append(i)
    return chosen

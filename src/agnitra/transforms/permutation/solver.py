"""The order of a space's channels that a state transform loses least on (`solve`).

1. A similarity graph over the channels: the correlation of their activations on calibration
   inputs where given (channels used together), else of their weight magnitudes across rows;
   each channel keeps its `neighbours` strongest links (a sparse graph).
2. Seeds: the spectral order (the Fiedler vector of the graph's normalised Laplacian, scipy's
   sparse eigensolver) puts similar channels next to each other, which suits a shared scale;
   Louvain communities (networkx) dealt round-robin into the groups put dissimilar channels
   together, which suits keeping 2 of 4; channels sorted by their largest weight share a range.
   The cheapest seed (the identity among them) starts the search.
3. Local search on C(pi). Where a pair of groups has few ways to share its channels (2:4: two
   groups of 4 split 35 ways), the stripe-pair move (after Pool & Yu, "Channel Permutations for
   N:M Sparsity", NeurIPS 2021): every split of a pair's channels is scored and the best kept; the
   gain of every pair of groups is tabled (or, where the pairs are too many for the time cap,
   batches of random pairs are scored), the best gains of distinct groups applied, and only the
   pairs touching a changed group scored again. Otherwise batches of random swaps between groups
   are scored at once and the improving ones that touch distinct groups applied. In both, at a
   local minimum a few bounded regressions (swaps costing at most `regression` of the current
   cost) leave it; the best order seen is kept and returned when the time cap ends the search.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from agnitra.transforms.permutation.costs import TwoFour, total_cost


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
          regression: float = 1e-4, seed: int = 0, moves: str = "auto") -> Solution:
    """The channel order of least C(pi) found within `seconds` (the best one seen is kept);
    `activations` [samples, channels]: the space's activations on calibration inputs, whose
    correlations make the similarity graph (else the importance's). `moves`: `stripes` (the
    stripe-pair move; `auto` where a pair of groups splits at most 35 ways), or `swaps`."""
    started = time.monotonic()
    importance, channels, group = cost.importance, cost.channels, cost.group
    if channels % group:
        raise ValueError(f"{channels} channels do not split into groups of {group}")
    identity = torch.arange(channels)
    timed = time.monotonic()
    identity_cost = total_cost(cost, identity)
    # the final exact cost is one more such sum, and a step may run longer than the last: both inside the cap
    deadline = started + 0.99 * seconds - (time.monotonic() - timed)
    graph = similarity_graph(importance, activations)
    seeds = {"identity": identity, "spectral": spectral_order(graph), "communities": community_order(graph, group, seed),
             "magnitude": torch.argsort(importance.amax(0), stable=True)}
    costs = {name: total_cost(cost, order) for name, order in seeds.items()}
    start = min(costs, key=costs.get)
    use_stripes = moves == "stripes" or (moves == "auto" and math.comb(2 * group - 1, group - 1) <= MAX_PARTITIONS)  # len(partitions(group))
    order, swaps, history = _local_search(cost, seeds[start].clone(), deadline, batch, regression, seed, started, until_stalled=use_stripes)
    if use_stripes:  # swaps first (cheap), the stripe-pair move from where they stall
        order, moved, more = _stripe_search(cost, order, deadline, batch, regression, seed, started)
        swaps, history = swaps + moved, history + more[1:]
    final = total_cost(cost, order)
    return Solution(order, final, identity_cost, start, time.monotonic() - started, swaps, history)


def _local_search(cost, order, deadline, batch, regression, seed, started, until_stalled=False):
    group, n_groups, generator, groups, scores, best, best_cost = _start(cost, order, seed)
    history, swaps, idle, step_s = [(time.monotonic() - started, best_cost)], 0, 0, 0.0
    if n_groups < 2:
        return order, 0, history
    while time.monotonic() + step_s < deadline:  # no step begun that the last one's length says would end past it
        tick = time.monotonic()
        ga, gb, new_a, new_b, delta = _random_swaps(cost, groups, scores, generator, batch)
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
        elif until_stalled and idle >= 19:
            break
        else:
            idle = idle + 1 if idle < 20 else 0  # after a few bounded regressions, back to improving
        step_s = time.monotonic() - tick
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


MAX_PARTITIONS = 35  # two groups of 4 (2:4): the stripe-pair move's splits are scored in full up to this many


def partitions(group: int) -> torch.Tensor:
    """[K, 2 * group]: every way to deal two groups' 2g channels (positions 0..2g-1) into two
    groups of g, each split once (position 0 always in the first group), the identity first."""
    n = 2 * group
    rows = []
    for rest in itertools.combinations(range(1, n), group - 1):
        first = (0, *rest)
        rows.append(first + tuple(i for i in range(n) if i not in first))
    return torch.tensor(rows, dtype=torch.long)


def pair_costs(cost, columns: torch.Tensor, splits: torch.Tensor) -> torch.Tensor:
    """columns [P, 2g]: the channels of P pairs of groups -> [P, K] the cost of both groups under
    each split (`partitions`)."""
    g = cost.group
    if isinstance(cost, TwoFour) and g == 4 and cost.keep == 2:
        halves = torch.cat([splits[:, :g], splits[:, g:]])  # the 2K subsets of 4 positions
        kept = cost.pair_kept(columns, halves)  # [P, 2K]
        total = cost.by_channel[columns].sum((-1, -2))
        k = splits.shape[0]
        return total[:, None] - kept[:, :k] - kept[:, k:]
    dealt = columns[:, splits].reshape(columns.shape[0], splits.shape[0], 2, g)
    return cost.group_costs(dealt).sum(-1)


def _stripe_search(cost, order, deadline, batch, regression, seed, started):
    """The stripe-pair local search (module docstring): every pair of groups tabled with its best
    split where scoring them all fits a quarter of the time left, else random batches of pairs."""
    group, n_groups, generator, groups, scores, best, best_cost = _start(cost, order, seed)
    history, moved = [(time.monotonic() - started, best_cost)], 0
    if n_groups < 2:
        return order, 0, history
    splits = partitions(group)
    first, second = torch.triu_indices(n_groups, n_groups, 1)
    n_pairs = first.numel()
    rows = cost.importance.shape[0]
    chunk = max(1, min(n_pairs, int(4e6 // max(1, rows * splits.shape[0]))))  # ~16 MB of partial sums a pass

    def score(index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = first[index], second[index]
        costs = pair_costs(cost, torch.cat([groups[a], groups[b]], 1), splits)
        low, choice = costs.min(1)
        return costs[:, 0] - low, choice

    probe = torch.randperm(n_pairs, generator=generator)[:chunk]
    t0 = time.monotonic()
    score(probe)
    per_pair = (time.monotonic() - t0) / probe.numel()
    tabled = per_pair * n_pairs <= 0.25 * max(0.0, deadline - time.monotonic())
    gain = torch.zeros(n_pairs)
    choice = torch.zeros(n_pairs, dtype=torch.long)
    stale = torch.ones(n_pairs, dtype=torch.bool)
    idle, step_s = 0, 0.0
    while time.monotonic() + step_s < deadline:
        tick = time.monotonic()
        current = float(scores.sum())
        if tabled:
            pending = stale.nonzero().squeeze(1)
            for start in range(0, pending.numel(), chunk):
                if time.monotonic() >= deadline:
                    break
                index = pending[start:start + chunk]
                gain[index], choice[index] = score(index)
                stale[index] = False
            candidates = ((gain > 1e-6 * current / n_groups) & ~stale).nonzero().squeeze(1)
            cand_gain, cand_choice = gain[candidates], choice[candidates]
        else:
            # pairs with a costly group first: one group drawn by its cost, the other at random
            a = torch.multinomial(scores.clamp_min(0) + 1e-12, min(chunk, n_pairs), replacement=True, generator=generator)
            b = (a + torch.randint(1, n_groups, a.shape, generator=generator)) % n_groups
            low, high = torch.minimum(a, b), torch.maximum(a, b)
            candidates = low * n_groups - low * (low + 1) // 2 + (high - low - 1)  # the pair's index in triu order
            cand_gain, cand_choice = score(candidates)
            keep = cand_gain > 1e-6 * current / n_groups
            candidates, cand_gain, cand_choice = candidates[keep], cand_gain[keep], cand_choice[keep]
        used: set[int] = set()
        applied = []
        for i in torch.argsort(cand_gain, descending=True).tolist():
            pair = int(candidates[i])
            a, b = int(first[pair]), int(second[pair])
            if a in used or b in used:
                continue
            used.update((a, b))
            dealt = torch.cat([groups[a], groups[b]])[splits[int(cand_choice[i])]]
            applied.append((a, b, groups[a].clone(), groups[b].clone()))
            groups[a], groups[b] = dealt[:group], dealt[group:]
        if applied:
            touched = torch.tensor(sorted(used))
            before = scores[touched].clone()
            scores[touched] = cost.group_costs(groups[touched])
            for a, b, old_a, old_b in applied:  # exact check: a move the fast scoring misjudged is undone
                ia, ib = int((touched == a).nonzero()), int((touched == b).nonzero())
                if float(scores[touched[ia]] + scores[touched[ib]]) > float(before[ia] + before[ib]):
                    groups[a], groups[b] = old_a, old_b
                    scores[[a, b]] = before[[ia, ib]]
            moved += len(applied)
            stale |= torch.isin(first, touched) | torch.isin(second, touched)
        total = float(scores.sum())
        if total < best_cost - 1e-12 * abs(best_cost):
            best, best_cost, idle = groups.clone(), total, 0
            history.append((time.monotonic() - started, best_cost))
        elif not applied or not tabled:
            idle += 1
        if (tabled and not applied and not stale.any()) or idle >= 20:  # a local minimum: a few bounded regressions
            touched = _regress(cost, groups, scores, generator, regression, batch)
            if touched.numel():
                stale |= torch.isin(first, touched) | torch.isin(second, touched)
                moved += touched.numel() // 2
            idle = 0
        step_s = time.monotonic() - tick
    return best.reshape(-1), moved, history


def _regress(cost, groups, scores, generator, regression, batch, limit: int = 2) -> torch.Tensor:
    """Up to `limit` random swaps between distinct groups that each cost at most `regression` of
    the current cost, applied; the groups they touched."""
    ga, gb, new_a, new_b, delta = _random_swaps(cost, groups, scores, generator, batch)
    chosen = _distinct(ga, gb, delta, (delta > 0) & (delta < regression * float(scores.sum())), limit)
    for i in chosen:
        a, b = int(ga[i]), int(gb[i])
        groups[a], groups[b] = new_a[i], new_b[i]
    touched = torch.tensor(sorted({int(ga[i]) for i in chosen} | {int(gb[i]) for i in chosen}), dtype=torch.long)
    if touched.numel():
        scores[touched] = cost.group_costs(groups[touched])
    return touched


def _random_swaps(cost, groups, scores, generator, batch):
    """`batch` random swaps of one channel between two distinct groups: the groups, their new
    contents and the change of cost of each."""
    n_groups, group = groups.shape
    ga = torch.randint(n_groups, (batch,), generator=generator)
    gb = (ga + torch.randint(1, n_groups, (batch,), generator=generator)) % n_groups
    ia, ib = torch.randint(group, (batch,), generator=generator), torch.randint(group, (batch,), generator=generator)
    new_a, new_b = groups[ga].clone(), groups[gb].clone()
    rows = torch.arange(batch)
    new_a[rows, ia], new_b[rows, ib] = groups[gb, ib], groups[ga, ia]
    return ga, gb, new_a, new_b, cost.group_costs(new_a) + cost.group_costs(new_b) - scores[ga] - scores[gb]


def _start(cost, order, seed):
    """A search's state: the group size and count, its random generator, the order as groups,
    each group's cost, and the best order so far (the start) with its cost."""
    group = cost.group
    n_groups = order.numel() // group
    groups = order.reshape(n_groups, group).clone()
    scores = cost.group_costs(groups)
    return group, n_groups, torch.Generator().manual_seed(seed), groups, scores, groups.clone(), float(scores.sum())

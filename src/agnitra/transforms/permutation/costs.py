"""What an order of a space's channels costs a state transform that works on groups of
consecutive input channels, `C(pi)` in the solver's terms (lower is better):

- `TwoFour`: 2:4 sparsity keeps the 2 largest of every 4; the cost is the importance it drops;
- `GroupQuant`: weight-only int4/int8 with one scale per group of input channels; the cost is
  the expected rounding error, which the largest weight of each row's group sets;
- `Blocks`: block sparsity keeps whole blocks of rows x channels; the cost is the importance of
  the blocks it drops at a given density.

Each takes the importance matrix of the space: every weight that reads the space stacked by rows
(rows x channels), |W| scaled by each channel's activation norm on calibration inputs where they
were given (what a channel's weights contribute to the output), and scores groups of channels in
batches, so that the solver can try many swaps at once."""

from __future__ import annotations

import torch


class GroupCost:
    """A cost bound to its space's data: `importance` [rows, channels] (non-negative: what the
    similarity graph and the magnitude seed read), `group` channels per group."""

    group: int
    importance: torch.Tensor

    @property
    def channels(self) -> int:
        return self.importance.shape[1]

    def group_costs(self, groups: torch.Tensor) -> torch.Tensor:
        """groups [..., group] channel indices -> [...] the cost of each group over all rows."""
        raise NotImplementedError


class TwoFour(GroupCost):
    """2 of every 4 consecutive channels kept, per row: the importance dropped."""

    def __init__(self, importance: torch.Tensor, group: int = 4, keep: int = 2) -> None:
        self.importance, self.group, self.keep = importance, group, keep
        self._by_channel = None  # importance.T, contiguous: a channel's rows in one run (gathered per group)

    @property
    def by_channel(self) -> torch.Tensor:
        if self._by_channel is None:
            self._by_channel = self.importance.T.contiguous()
        return self._by_channel

    def group_costs(self, groups: torch.Tensor) -> torch.Tensor:
        if self.group == 4 and self.keep == 2:  # 2 of 4: the larger of each half's best, or one half whole (no sort)
            a, b, c, d = self.by_channel[groups].unbind(-2)  # each [..., rows]
            kept = torch.maximum(torch.maximum(a, b) + torch.maximum(c, d), torch.maximum(a + b, c + d))
            return (a + b + c + d - kept).sum(-1)
        picked = self.importance[:, groups]  # [rows, ..., group]
        return (picked.sum(-1) - picked.topk(self.keep, dim=-1).values.sum(-1)).sum(0)

    def pair_kept(self, columns: torch.Tensor, subsets: torch.Tensor) -> torch.Tensor:
        """columns [P, 8]: two groups' channels; subsets [S, 4] positions among the 8 -> [P, S]
        the importance 2:4 keeps of each subset as one group (over all rows): every pair's sum and
        larger member computed once, each subset split into two pairs (see `group_costs`)."""
        x = self.by_channel[columns]  # [P, 8, rows]
        first, second = torch.triu_indices(8, 8, 1)
        index = torch.full((8, 8), -1, dtype=torch.long)
        index[first, second] = torch.arange(first.numel())
        sums, larger = x[:, first] + x[:, second], torch.maximum(x[:, first], x[:, second])  # [P, 28, rows]
        left, right = index[subsets[:, 0], subsets[:, 1]], index[subsets[:, 2], subsets[:, 3]]
        kept = larger[:, left] + larger[:, right]  # [P, S, rows]; a few large ops (each a parallel region)
        return torch.maximum(kept, torch.maximum(sums[:, left], sums[:, right]), out=kept).sum(-1)


class GroupQuant(GroupCost):
    """One asymmetric scale per row and group of `group` channels at `bits` (as Agnitra's int4
    weight-only format): each weight's rounding noise is step^2/12 with step = the group's range
    in that row / (2^bits - 1), weighted by its channel's activation norm squared."""

    def __init__(self, weights: torch.Tensor, norms: torch.Tensor | None = None, group: int = 32, bits: int = 4) -> None:
        self.weights = weights.detach().float()
        self.norms2 = (norms.float() ** 2 if norms is not None else torch.ones_like(self.weights))
        self.importance = self.weights.abs() * self.norms2.sqrt()
        self.group, self.levels = group, 2**bits - 1

    def group_costs(self, groups: torch.Tensor) -> torch.Tensor:
        w = self.weights[:, groups]  # [rows, ..., group]
        step = (w.amax(-1) - w.amin(-1)) / self.levels
        return (step**2 / 12 * self.norms2[:, groups].sum(-1)).sum(0)


class Blocks(GroupCost):
    """Blocks of `rows` x `group` kept by importance at `density`: the importance dropped, with
    the rows' blocks fixed (only the channel order moves)."""

    def __init__(self, importance: torch.Tensor, group: int = 16, rows: int = 16, density: float = 0.5) -> None:
        self.importance, self.group, self.rows, self.density = importance, group, rows, density

    def group_costs(self, groups: torch.Tensor) -> torch.Tensor:
        picked = self.importance[:, groups]  # [rows, ..., group]
        n_rows = picked.shape[0] - picked.shape[0] % self.rows
        blocks = picked[:n_rows].reshape(n_rows // self.rows, self.rows, *picked.shape[1:]).sum((1, -1))  # [row blocks, ...]
        kept = blocks.topk(max(1, round(self.density * blocks.shape[0])), dim=0).values.sum(0)
        return blocks.sum(0) - kept


def total_cost(cost: GroupCost, order: torch.Tensor) -> float:
    """C(order): the cost of every group of the space's channels taken in `order`."""
    return float(cost.group_costs(order.reshape(-1, cost.group)).sum())


def stacked(weights: list[torch.Tensor], norms: list[torch.Tensor | None] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights that read a space (each [rows, channels]) stacked by rows as float32, and each
    one's input activation norms per channel broadcast to its rows (None where none were given)."""
    w = torch.cat([t.detach().float().cpu().reshape(-1, t.shape[-1]) for t in weights], 0)  # the solver runs on the CPU
    if not norms or any(n is None for n in norms):
        return w, None
    return w, torch.cat([n.float().cpu().expand(t.reshape(-1, t.shape[-1]).shape) for t, n in zip(weights, norms)], 0)


class InUnits(GroupCost):
    """`inner` with channels moved only in whole units of `unit` consecutive channels: after a
    step that fixed groups (2:4's fours, a quantisation's scale groups), a new order may move
    those groups but not break them. Its channels are the units."""

    def __init__(self, inner: GroupCost, unit: int) -> None:
        if inner.group % unit:
            raise ValueError(f"groups of {inner.group} channels do not hold whole units of {unit}")
        self.inner, self.unit, self.group = inner, unit, inner.group // unit
        d = inner.channels
        self.importance = inner.importance.reshape(inner.importance.shape[0], d // unit, unit).sum(-1)

    def group_costs(self, groups: torch.Tensor) -> torch.Tensor:
        channels = (groups.unsqueeze(-1) * self.unit + torch.arange(self.unit)).flatten(-2)
        return self.inner.group_costs(channels)

    def channel_order(self, unit_order: torch.Tensor) -> torch.Tensor:
        """A permutation of the units as one of the channels."""
        return (unit_order.unsqueeze(-1) * self.unit + torch.arange(self.unit)).reshape(-1)

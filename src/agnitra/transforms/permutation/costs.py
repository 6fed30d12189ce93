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

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TwoFour:
    """2 of every 4 consecutive channels kept, per row: the importance dropped."""

    group: int = 4
    keep: int = 2

    def group_costs(self, importance: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """groups [..., group] channel indices -> [...] importance dropped over all rows."""
        picked = importance[:, groups]  # [rows, ..., group]
        dropped = picked.sum(-1) - picked.topk(self.keep, dim=-1).values.sum(-1)
        return dropped.sum(0)


@dataclass(frozen=True)
class GroupQuant:
    """One symmetric scale per row and group of `group` channels at `bits`: each channel's
    rounding noise is step^2/12, the step set by the group's largest weight in that row."""

    group: int = 32
    bits: int = 4

    def group_costs(self, importance: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        magnitude = (weights if weights is not None else importance)[:, groups]  # [rows, ..., group]
        levels = 2 ** (self.bits - 1) - 1
        step = magnitude.amax(-1) / levels
        scale = importance[:, groups] / magnitude.clamp_min(1e-30)  # the activation norm of each channel
        return (step.unsqueeze(-1) ** 2 / 12 * scale**2).sum(-1).sum(0)


@dataclass(frozen=True)
class Blocks:
    """Blocks of `rows` x `group` kept by importance at `density`: the importance dropped, with
    the rows' blocks fixed (only the channel order moves)."""

    group: int = 16
    rows: int = 16
    density: float = 0.5

    def group_costs(self, importance: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        picked = importance[:, groups]  # [rows, ..., group]
        n_rows = picked.shape[0] - picked.shape[0] % self.rows
        blocks = picked[:n_rows].reshape(n_rows // self.rows, self.rows, *picked.shape[1:]).sum((1, -1))  # [row blocks, ...]
        kept = blocks.topk(max(1, round(self.density * blocks.shape[0])), dim=0).values.sum(0)
        return blocks.sum(0) - kept


def total_cost(cost, importance: torch.Tensor, order: torch.Tensor) -> float:
    """C(order): the cost of every group of the space's channels taken in `order`."""
    return float(cost.group_costs(importance, order.reshape(-1, cost.group)).sum())


def importance_matrix(weights: list[torch.Tensor], activation_norms: torch.Tensor | None = None) -> torch.Tensor:
    """The weights that read a space (each [rows, channels]) stacked by rows, as float32
    magnitudes, each channel scaled by its activation norm where one is given."""
    stacked = torch.cat([w.detach().float().abs().reshape(-1, w.shape[-1]) for w in weights], 0)
    return stacked * activation_norms.float() if activation_norms is not None else stacked

"""What an order of one KV head's head-dimension channels costs a group-wise quantised KV cache,
`C(pi)` in the solver's terms (`costs.GroupCost`'s interface: `importance`, `group`,
`group_costs`), over the head's keys or values on calibration inputs.

Each cached token's group of channels gets one asymmetric scale, its range / (2^bits - 1); the
rounding noise of a channel is step^2 / 12, weighted by what an error there costs the attention:
for a key channel the query energy that multiplies it (sum over the query heads that read the key
head of E[q_c^2]), for a value channel the squared norm of the output projection's columns it
feeds. Keys are rotated in pairs (c, c + D/2) by RoPE, so their unit is a pair: pair p sits in
group p // G of the first half and of the second half, both counted."""

from __future__ import annotations

import torch

from agnitra.transforms.permutation.costs import GroupCost


class KVGroupQuant(GroupCost):
    """`acts` [tokens, D] one head's cached keys or values, `weights` [D] each channel's error
    weight, groups of `group` channels (of `group` pairs where `paired`) at `bits`."""

    def __init__(self, acts: torch.Tensor, weights: torch.Tensor, group: int, bits: int, paired: bool = False) -> None:
        self.acts, self.weights = acts.detach().float().cpu(), weights.detach().float().cpu()
        self.group, self.levels, self.paired = group, 2**bits - 1, paired
        self.half = self.acts.shape[1] // 2
        scaled = self.acts.abs() * self.weights.sqrt()
        self.importance = (scaled[:, : self.half] ** 2 + scaled[:, self.half :] ** 2).sqrt() if paired else scaled

    def _error(self, channels: torch.Tensor) -> torch.Tensor:
        x = self.acts[:, channels]  # [tokens, ..., group]
        step = (x.amax(-1) - x.amin(-1)) / self.levels
        return (step**2 / 12).sum(0) * self.weights[channels].sum(-1)

    def group_costs(self, groups: torch.Tensor) -> torch.Tensor:
        if self.paired:
            return self._error(groups) + self._error(groups + self.half)
        return self._error(groups)

"""State transforms the layout pipeline serves, each as it changes a Linear's weight in place
(`apply`: the pruned or rounded values, as the real kernels will compute with them) and as the
cost its solver minimises over the order of the weight's input channels (`cost`).

Written `sparsity:2:4`, `blocks:16:0.5` (blocks of 16 x 16, half kept), `quant:int4` (group 32),
`quant:int4:g128`, `quant:int8` (per row), `quant:int3[:gG]` and `quant:int2[:gG]` (no kernel: their
quality is measured on the rounded weights held dense). KV-cache steps (`kv:int8[:gN]`, `kv:int4[:gN]`,
`kv:prune:F`) change no weight: `transforms/permutation/kv.py` installs them as a compressed
cache and orders the key and value channels for them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agnitra.errors import UserError
from agnitra.transforms.permutation.costs import Blocks, GroupCost, GroupQuant, TwoFour, stacked


@dataclass(frozen=True)
class StateStep:
    kind: str  # sparsity, blocks, quant, kv (the KV cache: quantised when bits, pruned when density < 1)
    group: int  # input channels a group holds (the solver's unit); kv: head-dimension channels sharing a scale (0: a whole head)
    bits: int = 0
    density: float = 1.0
    text: str = ""

    @property
    def ordered(self) -> bool:
        """Whether the order of input channels changes what the step loses (not for one scale a row;
        a kv step's channels are the heads', `kv.ordered`)."""
        return self.group > 0 and self.kind != "kv"

    def fits(self, weight: torch.Tensor) -> bool:
        if weight.dim() != 2:
            return False
        if self.kind == "kv":
            return False  # it changes the KV cache, no Linear
        return not self.group or weight.shape[1] % self.group == 0 and (self.kind != "blocks" or weight.shape[0] % self.group == 0)

    def cost(self, weights: list[torch.Tensor], norms: list[torch.Tensor | None]) -> GroupCost:
        w, n = stacked(weights, norms)
        importance = w.abs() * n if n is not None else w.abs()
        if self.kind == "sparsity":
            return TwoFour(importance)
        if self.kind == "blocks":
            return Blocks(importance, group=self.group, rows=self.group, density=self.density)
        return GroupQuant(w, n, group=self.group, bits=self.bits)

    def apply(self, weight: torch.Tensor, norms: torch.Tensor | None = None) -> None:
        """The weight as the transform leaves it, in place."""
        with torch.no_grad():
            weight.copy_(self.transformed(weight, norms))

    def transformed(self, weight: torch.Tensor, norms: torch.Tensor | None = None) -> torch.Tensor:
        """Pruning keeps the weights of most importance, |W| times the input channel's activation
        norm where `norms` are given (what the solver's cost counts), else |W|."""
        w = weight.detach().float()
        n, k = w.shape
        importance = w.abs() * norms.to(w.device, torch.float32) if norms is not None else w.abs()  # norms are kept on the CPU
        if self.kind == "sparsity":
            groups = w.reshape(n, k // 4, 4)
            keep = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, importance.reshape(n, k // 4, 4).topk(2, dim=-1).indices, True)
            return (groups * keep).reshape(n, k).to(weight.dtype)
        if self.kind == "blocks":
            b = self.group
            blocks = w.reshape(n // b, b, k // b, b)
            mass = importance.reshape(n // b, b, k // b, b).sum((1, 3))  # [row blocks, column blocks]
            kept = mass.flatten().topk(max(1, round(self.density * mass.numel()))).indices
            mask = torch.zeros(mass.numel(), dtype=torch.bool, device=w.device).scatter_(0, kept, True).reshape(mass.shape)
            return (blocks * mask[:, None, :, None]).reshape(n, k).to(weight.dtype)
        size = self.group or k
        groups = w.reshape(n, k // size, size)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        step = ((high - low) / (2**self.bits - 1)).clamp_min(1e-12)
        rounded = (torch.round((groups - low) / step) * step + low).reshape(n, k)
        return (rounded * (w != 0)).to(weight.dtype)  # pruned weights stay zero: a sparse format holds only the kept ones


def parse_steps(text: str) -> list[StateStep]:
    """`sparsity:2:4,quant:int4[:gG],quant:int8,quant:int3|int2[:gG],blocks:B:DENSITY,kv:int8[:gG],kv:int4[:gG],kv:prune:F`
    -> the steps in order."""
    steps = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        fields = part.split(":")
        kind = fields[0]
        if kind == "sparsity" and fields[1:] == ["2", "4"]:
            steps.append(StateStep("sparsity", 4, text=part))
        elif kind == "quant" and len(fields) in (2, 3) and fields[1] in ("int2", "int3", "int4", "int8"):
            bits = int(fields[1][3:])
            group = int(fields[2][1:]) if len(fields) == 3 and fields[2].startswith("g") and fields[2][1:].isdigit() else (32 if bits < 8 else 0)
            if len(fields) == 3 and not (fields[2].startswith("g") and fields[2][1:].isdigit()):
                raise UserError(f"--transform {part}: the group is written gN, e.g. quant:int4:g128")
            steps.append(StateStep("quant", group, bits=bits, text=part))
        elif kind == "blocks" and len(fields) == 3:
            try:
                size, density = int(fields[1]), float(fields[2])
            except ValueError:
                size, density = 0, 0.0
            if size < 2 or not 0 < density < 1:
                raise UserError(f"--transform {part}: blocks:SIZE:DENSITY with SIZE >= 2 and DENSITY between 0 and 1, e.g. blocks:16:0.5")
            steps.append(StateStep("blocks", size, density=density, text=part))
        elif kind == "kv":
            steps.append(_kv_step(part, fields[1:]))
        else:
            raise UserError(f"--transform {part} is not a state transform; use sparsity:2:4, quant:int4[:gN], quant:int8, quant:int3|int2[:gN], blocks:SIZE:DENSITY or kv:int8|kv:int4[:gN]|kv:prune:F")
    if not steps:
        raise UserError("--transform names no state transform; e.g. --transform sparsity:2:4,quant:int4")
    return steps


def _kv_step(part: str, fields: list[str]) -> StateStep:
    """kv:int8 (one scale a token and head), kv:int8:gN / kv:int4[:gN] (groups of N head-dimension
    channels; kv:int4 alone: g32), kv:prune:F (the fraction F of each head's channels not stored)."""
    if fields[:1] == ["prune"]:
        try:
            fraction = float(fields[1]) if len(fields) == 2 else -1.0
        except ValueError:
            fraction = -1.0
        if not 0 < fraction < 1:
            raise UserError(f"--transform {part}: kv:prune:F with F between 0 and 1 (the share of each head's key/value channels dropped), e.g. kv:prune:0.25")
        return StateStep("kv", 0, density=1.0 - fraction, text=part)
    if fields[:1] in (["int8"], ["int4"]) and len(fields) <= 2:
        bits = int(fields[0][3:])
        if len(fields) == 2 and not (fields[1].startswith("g") and fields[1][1:].isdigit() and int(fields[1][1:]) > 0):
            raise UserError(f"--transform {part}: the group is written gN (N channels of a head sharing a scale, N dividing the head size), e.g. kv:int4:g32")
        group = int(fields[1][1:]) if len(fields) == 2 else (32 if bits == 4 else 0)
        return StateStep("kv", group, bits=bits, text=part)
    raise UserError(f"--transform {part} is not a KV-cache step; use kv:int8[:gN], kv:int4[:gN] or kv:prune:F, e.g. kv:int4:g32")

"""`GivenModel`: a model the caller built (another version of the workload's model: pruned,
quantised, permuted) measured and verified beside the workload's own, under a name of its own."""

from __future__ import annotations

import torch
from torch import nn

from agnitra.bench.variants.base import Prepared, Variant
from agnitra.workloads.base import Workload


class GivenModel(Variant):
    description = "a model given by the caller"

    def __init__(self, name: str, model: nn.Module, lossy: bool = True) -> None:
        self.name, self.model, self.lossy = name, model, lossy

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        model = self.model.to(device).eval()
        if workload.decoder is not None:
            return Prepared(model=model, lossy=self.lossy)
        return Prepared(call=model, lossy=self.lossy)

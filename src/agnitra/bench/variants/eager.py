"""`eager`: the model as given, run under no_grad."""

from __future__ import annotations

import torch

from agnitra.bench.variants.base import Prepared, Variant, register_variant
from agnitra.workloads.base import Workload


class Eager(Variant):
    name = "eager"
    description = "the model as given (PyTorch eager)"

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        if workload.decoder is not None:
            return Prepared(model=workload.model)
        return Prepared(call=workload.model)


register_variant(Eager())

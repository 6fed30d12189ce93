"""`compile`, `compile-max-autotune`, `compile-reduce-overhead`: torch.compile as a user would set it.

Decoders compile the decode step (fullgraph, static shapes over the static KV cache) the way
gpt-fast does, with Inductor's coordinate-descent tuning on the GPU; the prompt prefill stays
eager and is reported apart. Settings go through `options=` on each compile call, never through
global Inductor config.
"""

from __future__ import annotations

import shutil

import torch

from agnitra.bench.variants.base import Prepared, Variant, register_variant
from agnitra.errors import check
from agnitra.models.generate import decode_one_token, prefill
from agnitra.workloads.base import Workload


def inductor_options(mode: str, device: torch.device, decoder: bool) -> dict:
    import torch._inductor

    options = dict(torch._inductor.list_mode_options(mode))
    if decoder and device.type == "cuda":
        options["coordinate_descent_tuning"] = True  # as gpt-fast: tunes the decode step's small kernels
    return options


class Compile(Variant):
    def __init__(self, name: str, mode: str, description: str) -> None:
        self.name, self.mode, self.description = name, mode, description

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        check(device.type == "cuda" or shutil.which("g++") or shutil.which("c++"), "torch.compile on the CPU needs a C++ compiler (install g++)")
        check(
            not (self.mode == "reduce-overhead" and device.type != "cuda"),
            "reduce-overhead captures CUDA graphs; on the CPU it would be plain `compile` measured twice",
        )
        options = inductor_options(self.mode, device, workload.decoder is not None)
        if workload.decoder is not None:
            step = torch.compile(decode_one_token, fullgraph=True, dynamic=False, options=options)
            return Prepared(decode_fn=step, prefill_fn=prefill, notes=f"decode step compiled, options {options}")
        model = torch.compile(workload.model, dynamic=False, options=options)
        return Prepared(call=model, notes=f"options {options}")


register_variant(Compile("compile", "default", "torch.compile, default mode"))
register_variant(Compile("compile-max-autotune", "max-autotune", "torch.compile mode max-autotune (GEMM autotuning, CUDA graphs)"))
register_variant(Compile("compile-reduce-overhead", "reduce-overhead", "torch.compile mode reduce-overhead (CUDA graphs)"))

"""`compile`: torch.compile in a chosen mode; for decoders the decode step is compiled (fullgraph,
static shapes over the static KV cache) as gpt-fast does, with coordinate-descent tuning on the
GPU. `freezing` folds the weights into the compiled graph as constants (inference only)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import torch
from torch import nn

from agnitra.errors import check
from agnitra.models.generate import decode_one_token
from agnitra.transforms.base import Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import ModelWrapper

MODES = ("default", "max-autotune", "reduce-overhead", "max-autotune-no-cudagraphs")


def inductor_options(mode: str, device: torch.device, decoder: bool, freezing: bool) -> dict:
    import torch._inductor

    options = dict(torch._inductor.list_mode_options(mode))
    if decoder and device.type == "cuda":
        options["coordinate_descent_tuning"] = True
    if freezing:
        options["freezing"] = True
    return options


@register_transform
class Compile(Transform):
    name = "compile"
    description = "torch.compile (Inductor); decoders: the decode step, fullgraph over the static KV cache"
    requires = "a C++ compiler on the CPU; CUDA-graph modes need a GPU"
    stage = "runtime"

    @dataclass
    class Params:
        mode: str = "default"
        freezing: bool = False

    def check(self, ctx: TransformContext, params) -> None:
        check(params.mode in MODES, f"compile mode must be one of {', '.join(MODES)}")
        check(ctx.device.type == "cuda" or shutil.which("g++") or shutil.which("c++"), "torch.compile on the CPU needs a C++ compiler (install g++)")
        check(not (params.mode == "reduce-overhead" and ctx.device.type != "cuda"), "reduce-overhead captures CUDA graphs; on the CPU it is the default mode")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        options = inductor_options(params.mode, ctx.device, ctx.decoder, params.freezing)
        if ctx.decoder:
            wrapper = ModelWrapper(model)
            wrapper.agnitra_decode_fn = torch.compile(decode_one_token, fullgraph=True, dynamic=False, options=options)
            return wrapper
        return ModelWrapper(model, torch.compile(model, dynamic=False, options=options))

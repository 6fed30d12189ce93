"""`compile`: torch.compile in a chosen mode; for decoders the decode step is compiled (fullgraph,
static shapes over the static KV cache) as gpt-fast does, with coordinate-descent tuning on the
GPU. `freezing` folds the weights into the compiled graph as constants (inference only). `pdl`
(default on) turns on Inductor's programmatic dependent launch on Hopper and later GPUs: each
kernel starts while the one before it ends (a decode step's short kernels overlap); where the GPU
or this torch lacks it, the report says so."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import torch
from torch import nn

from agnitra.errors import check
from agnitra.models.generate import decode_one_token
from agnitra.transforms.base import Choice, Transform, TransformContext, register_transform
from agnitra.transforms.wrappers import ModelWrapper

MODES = ("default", "max-autotune", "reduce-overhead", "max-autotune-no-cudagraphs")


def inductor_options(mode: str, device: torch.device, decoder: bool, freezing: bool, pdl: bool = False, coordinate_descent: bool = True) -> dict:
    import torch._inductor

    options = dict(torch._inductor.list_mode_options(mode))
    if decoder and device.type == "cuda" and coordinate_descent:
        options["coordinate_descent_tuning"] = True
    if freezing:
        options["freezing"] = True
    if pdl and inductor_pdl_unavailable(device) is None:
        options["triton.enable_pdl"] = True
    return options


def _pdl_available(device: torch.device) -> bool:
    try:
        return inductor_pdl_unavailable(device) is None
    except (RuntimeError, AssertionError):  # no usable CUDA runtime here: judged where it runs
        return False


def inductor_pdl_unavailable(device: torch.device) -> str | None:
    """Why Inductor cannot launch its kernels with programmatic dependent launch here (None: it can)."""
    import torch._inductor.config as inductor_config

    from agnitra.kernels.pdl import device_without_pdl

    why = device_without_pdl(device)
    if why is None and not hasattr(inductor_config.triton, "enable_pdl"):
        why = f"torch {torch.__version__}'s Inductor has no triton.enable_pdl"
    return why


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
        pdl: bool = True  # Inductor's programmatic dependent launch where the GPU has it (Hopper+)
        dynamic: bool = False  # symbolic shapes (one graph for inputs of any size); forward models only
        coordinate_descent: bool = True  # decoders on the GPU: Inductor tunes its kernels' launch configs (gpt-fast's setting)

    def choices(self, ctx: TransformContext) -> list[Choice]:
        """Modes x freezing x dynamic (forward models) x PDL off (where the GPU has it): the mode
        says whether CUDA graphs are captured (reduce-overhead, max-autotune) or not (default,
        max-autotune-no-cudagraphs; `cuda-graphs` may then capture the compiled forward)."""
        cuda = ctx.device.type == "cuda"
        if cuda:
            # reduce-overhead before max-autotune: faster where measured (bert-base b1 0.60 vs 0.73 ms,
            # llama-1b 725 vs 685 tok/s, H100) and compiled in a minute, where max-autotune's conv
            # tuning of resnet50 b64 outlasted a 222 s candidate timeout
            modes = {"reduce-overhead": 3.0 if ctx.decoder else 2.2, "max-autotune": 2.0, "max-autotune-no-cudagraphs": 1.7, "default": 1.5}
            freezing = {False: 1.0, True: 0.98}  # constant folding; not measured on the GPU yet
        else:  # no CUDA graphs on the CPU: reduce-overhead is refused, max-autotune-no-cudagraphs is max-autotune
            modes = {"default": 1.15, "max-autotune": 1.1}  # max-autotune: C++ GEMM templates, long compiles
            freezing = {True: 1.3 / 1.15, False: 1.0}  # weights folded and prepacked for oneDNN: measured faster
        dynamic = {False: 1.0} if ctx.decoder else {False: 1.0, True: 0.9}  # symbolic shapes specialise less
        pdl = {True: 1.0}
        if cuda and _pdl_available(ctx.device):
            pdl[False] = 0.9  # PDL off measured slower (docs/search.md)
        # off: Inductor's heuristic launch configurations, a shorter compile (only decoders on the GPU tune)
        tuning = {True: 1.0, False: 0.95} if cuda and ctx.decoder else {True: 1.0}
        out = []
        for mode, p_mode in modes.items():
            for frozen, p_frozen in freezing.items():
                for dyn, p_dyn in dynamic.items():
                    for launch, p_pdl in pdl.items():
                        for tune, p_tune in tuning.items():
                            params = (("mode", mode), ("freezing", frozen), ("dynamic", dyn), ("pdl", launch), ("coordinate_descent", tune))
                            out.append(Choice(self.name, params, round(p_mode * p_frozen * p_dyn * p_pdl * p_tune, 4)))
        return out

    def check(self, ctx: TransformContext, params) -> None:
        check(params.mode in MODES, f"compile mode must be one of {', '.join(MODES)}")
        check(ctx.device.type == "cuda" or shutil.which("g++") or shutil.which("c++"), "torch.compile on the CPU needs a C++ compiler (install g++)")
        check(not (params.mode == "reduce-overhead" and ctx.device.type != "cuda"), "reduce-overhead captures CUDA graphs; on the CPU it is the default mode")
        check(not (params.mode == "max-autotune-no-cudagraphs" and ctx.device.type != "cuda"), "on the CPU there are no CUDA graphs: max-autotune-no-cudagraphs is max-autotune")
        check(not (params.dynamic and ctx.decoder), "decoders compile their decode step with static shapes over the static KV cache: dynamic=true does not apply")

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        options = inductor_options(params.mode, ctx.device, ctx.decoder, params.freezing, params.pdl, params.coordinate_descent)
        if ctx.decoder:
            wrapper = ModelWrapper(model)
            wrapper.agnitra_decode_fn = torch.compile(decode_one_token, fullgraph=True, dynamic=False, options=options)
            return wrapper
        return ModelWrapper(model, torch.compile(model, dynamic=params.dynamic, options=options))

    def notes(self, ctx: TransformContext, params) -> list[str]:
        if not params.pdl or ctx.device.type != "cuda":
            return []
        from agnitra.kernels.pdl import pdl_note

        return [pdl_note("compile", inductor_pdl_unavailable(ctx.device), "Inductor's kernels launch with programmatic dependent launch")]

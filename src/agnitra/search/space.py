"""The recipe space: which transform combinations are worth measuring here, most promising first.

Built from the transforms that apply (each one's `check()` on this workload and device), combined
stage by stage (module transforms, then one runtime transform, or one backend instead), with
rules that prune combinations that cannot help or cannot compose. Each recipe gets a prior: the
speedup the rules expect, from what is known about the device and the workload; the learned cost
model of a later stage replaces these priors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from agnitra.errors import NotApplicable
from agnitra.transforms.base import TransformContext, get_transform
from agnitra.transforms.patcher import check_recipe
from agnitra.transforms.recipe import Recipe, Step


@dataclass(frozen=True)
class Choice:
    """One transform with fixed parameters, and the speedup the rules expect from it alone."""

    transform: str
    params: tuple[tuple[str, object], ...] = ()
    prior: float = 1.0

    def step(self) -> Step:
        transform = get_transform(self.transform)
        params = transform.parse_params(dict(self.params))
        import dataclasses

        return Step(self.transform, dataclasses.asdict(params))


@dataclass(frozen=True)
class Candidate:
    recipe: Recipe
    prior: float  # expected speedup over the baseline, from the rules


@dataclass
class Skipped:
    transform: str
    reason: str


def _fast_cpu_bf16() -> bool:
    """AMX or AVX512-BF16: bf16 matmuls run 2-7x faster than fp32 on such CPUs."""
    from agnitra.telemetry.signature import cpu_signature

    flags = set(cpu_signature()["isa_flags"])
    return bool(flags & {"amx_bf16", "avx512_bf16"})


def module_choices(ctx: TransformContext) -> list[Choice]:
    cuda, decoder = ctx.device.type == "cuda", ctx.decoder
    # first in every recipe: quantisers that follow quantise the stacked Linears
    choices = [Choice("fuse-projections", (), 1.2 if decoder and cuda else 1.02)]
    if ctx.dtype == torch.float32:
        if cuda:
            choices += [Choice("precision", (("dtype", "bf16"),), 1.8), Choice("precision", (("dtype", "fp16"),), 1.8)]
        else:
            choices.append(Choice("precision", (("dtype", "bf16"),), 2.0 if _fast_cpu_bf16() else 0.8))
            choices.append(Choice("dynamic-int8", (), 1.6))
    # weight-only quantisation pays where weights dominate the bytes: decoders, small batches
    # on the GPU Inductor fuses the dequantisation into its decode GEMVs: measured 785 tok/s vs 677 for
    # bf16 and 748 for Agnitra's int8 kernels (llama-1b decode, H100, 2026-11-21, compile reduce-overhead)
    choices.append(Choice("int8-weight-only", (), 2.4 if decoder and cuda else 1.6 if decoder else 1.1))
    choices.append(Choice("int4-weight-only", (("group_size", 128),), 2.0 if decoder else 1.0))
    if cuda:
        choices += [Choice("fp8", (), 1.5), Choice("sparsity-2of4", (), 1.2)]
        # Agnitra's own kernels: quantised GEMVs read 2-4x fewer bytes in decode steps
        # decode=true: five fused kernels a Llama layer; measured 1095 tok/s vs 804 for int8 through
        # Inductor and 674 for bf16 (llama-1b decode, H100, 2026-11-21, compile reduce-overhead)
        choices += [
            Choice("triton-kernels", (("weights", "int8"),), 3.2 if decoder else 1.1),
            # int4 reads half of int8's bytes but rarely keeps logits within 20 dB SQNR: tried after int8
            Choice("triton-kernels", (("weights", "int4"), ("decode", False)), 2.0 if decoder else 1.0),
            # float weights: stacked q|k|v and, in encoders, Linear+GELU as one matmul-template launch;
            # encoders keep their LayerNorms with Inductor, which fuses the residual add into them:
            # bert-base b1 fp16 0.463 ms vs 0.569 for compile reduce-overhead alone (H100)
            Choice("triton-kernels", (("weights", "keep"), ("decode", False), ("norms", decoder)), 1.15 if decoder else 2.0),
        ]
    if cuda:
        # before channels-last, which then lays out the fused convs' weights: resnet50 b64 fp16 with
        # channels-last + compile reduce-overhead 2.24 ms with the fused epilogues vs 2.84 without (H100)
        choices.append(Choice("conv-fusion", (), 2.2))
    choices += [Choice("channels-last", (), 1.3), Choice("sdpa", (), 1.2)]
    return choices


def runtime_choices(ctx: TransformContext) -> list[Choice]:
    cuda = ctx.device.type == "cuda"
    if cuda:
        return [
            # before max-autotune: faster where measured (bert-base b1 0.60 vs 0.73 ms, llama-1b 725 vs
            # 685 tok/s, H100) and compiled in a minute, where max-autotune's conv tuning of resnet50
            # b64 outlasted a 222 s candidate timeout
            Choice("compile", (("mode", "reduce-overhead"),), 3.0 if ctx.decoder else 2.2),
            Choice("compile", (("mode", "max-autotune"),), 2.0),
            Choice("compile", (("mode", "default"),), 1.5),
            Choice("cuda-graphs", (), 1.8),
            Choice("tf32", (), 1.5),
        ]
    return [Choice("compile", (("mode", "default"), ("freezing", True)), 1.3), Choice("compile", (("mode", "default"),), 1.15), Choice("threads", (), 1.02)]


def backend_choices(ctx: TransformContext) -> list[Choice]:
    cpu = ctx.device.type == "cpu"
    return [Choice("onnxruntime", (("int8", True),), 2.5 if cpu else 1.0), Choice("onnxruntime", (), 1.1)]


# combinations that cannot compose or cannot help
_EXCLUSIVE_MODULE = [{"int8-weight-only", "int4-weight-only", "dynamic-int8", "fp8", "sparsity-2of4"}]
_BACKEND_ACCEPTS = {"precision", "channels-last", "sdpa"}  # module transforms an ONNX export keeps


def _compatible(modules: tuple[Choice, ...], runtime: Choice | None, backend: Choice | None) -> bool:
    names = [c.transform for c in modules]
    if len(names) != len(set(names)):
        return False
    for group in _EXCLUSIVE_MODULE:
        if len(group.intersection(names)) > 1:
            return False
    if "dynamic-int8" in names and "precision" in names:
        return False
    kernels = next((dict(c.params) for c in modules if c.transform == "triton-kernels"), None)
    if kernels is not None and kernels.get("weights") != "keep" and set(names) & _EXCLUSIVE_MODULE[0]:
        return False  # two weight quantisers
    if kernels is not None and kernels.get("weights") == "keep" and "int8-weight-only" in names:
        return False  # the same model as triton-kernels(weights=int8), which the space has
    if kernels is not None and kernels.get("fuse", True) and "fuse-projections" in names:
        return False  # the kernels stack the projections themselves (fuse=true): the same model
    if "conv-fusion" in names and "channels-last" not in names:
        return False  # cuDNN's fused NCHW kernels are slow: resnet50 b64 6.09 ms vs 2.24 channels-last (H100)
    if kernels is not None and backend is not None:
        return False  # kernels do not export to ONNX
    if backend is not None and (runtime is not None or not set(names) <= _BACKEND_ACCEPTS):
        return False
    if backend is not None and backend.transform == "onnxruntime" and ("dtype", "bf16") in next((c.params for c in modules if c.transform == "precision"), ()):
        return False  # ONNX Runtime has few bf16 kernels
    return True


WEIGHT_ONLY = {"int8-weight-only", "int4-weight-only"}


def _interaction(chosen: list[Choice], ctx: TransformContext) -> float:
    """What the transforms do together, beyond the product of their priors.

    On the CPU the fast weight-only int8/int4 kernels are the bf16 ones: on an fp32 model they
    are 5-12x slower than nn.Linear unless `precision` runs first (measured, torch 2.13, AMX CPU).
    """
    names = {c.transform for c in chosen}
    if ctx.device.type == "cpu" and names & WEIGHT_ONLY:
        return 1.5 if "precision" in names or ctx.dtype == torch.bfloat16 else 0.2
    return 1.0


def _applicable(choices: list[Choice], ctx: TransformContext, skipped: list[Skipped]) -> list[Choice]:
    from agnitra.transforms.base import all_transforms

    registered = {t.name for t in all_transforms()}
    kept = []
    for choice in choices:
        if choice.transform not in registered:
            skipped.append(Skipped(_label(choice), "not available in this installation"))
            continue
        try:
            check_recipe(Recipe((choice.step(),)), ctx)
            kept.append(choice)
        except NotApplicable as exc:
            skipped.append(Skipped(_label(choice), str(exc)))
    return kept


def _label(choice: Choice) -> str:
    return Step(choice.transform, dict(choice.params)).label()


def _other_transforms(allowed: set[str] | None, known: set[str]) -> dict[str, list[Choice]]:
    """Registered transforms the rules do not know (a user's own): default parameters, no prior."""
    from agnitra.transforms.base import all_transforms

    extra: dict[str, list[Choice]] = {"module": [], "runtime": [], "backend": []}
    for t in all_transforms():
        if t.name not in known and (allowed is None or t.name in allowed):
            extra[t.stage].append(Choice(t.name, (), 1.0))
    return extra


def recipe_space(ctx: TransformContext, allowed: set[str] | None = None, max_module_transforms: int = 2) -> tuple[list[Candidate], list[Skipped]]:
    """Applicable recipes, best prior first, and why each transform that was left out does not apply."""
    skipped: list[Skipped] = []

    def keep(choices: list[Choice]) -> list[Choice]:
        if allowed is not None:
            choices = [c for c in choices if c.transform in allowed]
        return _applicable(choices, ctx, skipped)

    ruled = {"module": module_choices(ctx), "runtime": runtime_choices(ctx), "backend": backend_choices(ctx)}
    extra = _other_transforms(allowed, {c.transform for choices in ruled.values() for c in choices})
    modules, runtimes, backends = (keep(ruled[stage] + extra[stage]) for stage in ("module", "runtime", "backend"))
    candidates: dict[str, Candidate] = {}
    for k in range(0, max_module_transforms + 1):
        for combo in itertools.combinations(modules, k):
            for runtime, backend in [(None, None)] + [(r, None) for r in runtimes] + [(None, b) for b in backends]:
                if not _compatible(combo, runtime, backend) or (not combo and runtime is None and backend is None):
                    continue
                chosen = [*combo] + [c for c in (runtime, backend) if c is not None]
                recipe = Recipe(tuple(c.step() for c in chosen))
                try:
                    check_recipe(recipe, ctx)  # the combination as a whole (e.g. fp16 then ORT)
                except NotApplicable:
                    continue
                prior = _interaction(chosen, ctx)
                for c in chosen:
                    prior *= c.prior
                candidates.setdefault(recipe.key(), Candidate(recipe, prior))
    ranked = sorted(candidates.values(), key=lambda c: (-c.prior, len(c.recipe.steps), c.recipe.name))
    return ranked, skipped

"""`mixed-precision`: each nn.Linear (or transformers Conv1D) gets its own weight format, chosen
by a per-layer sensitivity analysis on calibration inputs.

The policy is compact, so the search explores policies rather than layer assignments: a `low`
format for most layers (int4 with a `group_size`, fp8, int8 weight-only, or the CPU's dynamic
int8), a `high` format (`keep`: the layer's own dtype, or int8 / fp8 above an int4 low), and how
many layers are kept at `high`, most sensitive first: `keep_fraction` of them, or, where
`error_budget` is above 0, the fewest that bring the other layers' errors, added in quadrature
(sqrt(sum e^2), independent errors), within the budget.

Sensitivity: on a scratch copy of the model, each quantisable Linear in turn (a Linear used twice
counts once) is replaced by its `low` module and the model is run on the calibration inputs; its
score is the relative L2 error ||y - y_ref|| / ||y_ref|| of all floating outputs against the
unquantised copy (decoders: a prefill of a seeded prompt, the logits). The `ceil(keep_fraction *
n)` layers of largest error (or those the error budget needs) get `high`, the others `low`. The ranking is cached within the
process per (model fingerprint, calibration inputs, low format, layer selection), so the
candidates of one search that share a low format run it once. The quantised modules and their
fitness rules are those of `transforms.quantize` (`Int8WeightOnlyLinear`, `Int4WeightOnlyLinear`,
`Fp8Linear`, `DynamicInt8Linear`); each format's device rules are its own transform's `check()`.
A transformers Conv1D (GPT-2's projections) counts as a Linear: its weight is transposed to the
Linear layout once when its quantised module is built (`quantize.as_linear`). Convolutions stay
as they are: these quantisers serve nn.Linear and Conv1D only.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict
from dataclasses import astuple, dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from agnitra.errors import NotApplicable, check
from agnitra.pytree import tensor_leaves
from agnitra.transforms import quantize as q
from agnitra.transforms.base import Choice, Step, Transform, TransformContext, get_transform, register_transform, replace_modules
from agnitra.transforms.structure import in_features, out_features

logger = logging.getLogger(__name__)

LOW_FORMATS = ("int4", "fp8", "int8", "dynamic-int8")
HIGH_FORMATS = ("keep", "int8", "fp8")
# how much precision a format keeps: `high` must keep more than `low`
_RANK = {"int4": 1, "fp8": 2, "int8": 3, "dynamic-int8": 3, "keep": 4}
# the transform whose check() states each format's device rules
_TRANSFORM = {"int4": "int4-weight-only", "fp8": "fp8", "int8": "int8-weight-only", "dynamic-int8": "dynamic-int8"}
KEEP_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)  # the search's choices
ERROR_BUDGETS = (0.005, 0.01, 0.02, 0.05)  # relative output error, the layers' errors in quadrature
CACHE_ENTRIES = 32  # sensitivity rankings kept per process


# --------------------------------------------------------------------------------------------
# formats: the quantisers of transforms.quantize
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    name: str  # int4 | fp8 | int8 | dynamic-int8
    group_size: int = 128  # int4 only

    def label(self) -> str:
        return f"int4 g{self.group_size}" if self.name == "int4" else self.name

    def fits(self) -> q.FitFn:
        return {"int4": q._int4_fits_for(self.group_size), "fp8": q._fp8_fits, "int8": q._int8_fits, "dynamic-int8": q._dynamic_fits}[self.name]

    def build(self) -> Callable[[nn.Module], nn.Module]:
        """A Linear or Conv1D -> its quantised module."""
        if self.name == "int4":
            return lambda layer: q.Int4WeightOnlyLinear.from_linear(q.as_linear(layer), self.group_size)
        from_linear = {"fp8": q.Fp8Linear.from_linear, "int8": q.Int8WeightOnlyLinear.from_linear, "dynamic-int8": q.DynamicInt8Linear.from_linear}[self.name]
        return lambda layer: from_linear(q.as_linear(layer))

    def check(self, ctx: TransformContext, min_features: int, skip: str) -> None:
        transform = get_transform(_TRANSFORM[self.name])
        params = transform.Params(min_features=min_features, skip=skip)
        if self.name == "int4":
            params.group_size = self.group_size
        transform.check(ctx, params)


# --------------------------------------------------------------------------------------------
# sensitivity analysis
# --------------------------------------------------------------------------------------------


@dataclass
class Sensitivity:
    """Quantisable layers ranked by the output error each causes alone, largest first."""

    ranked: list[tuple[tuple[str, ...], float]]  # (the names one Linear is reached by, relative error)
    unfit: dict[str, int] = field(default_factory=dict)  # why the other Linears were left out -> count
    inputs: int = 0  # calibration batches used


_CACHE: OrderedDict[tuple, Sensitivity] = OrderedDict()
_ANALYSES = {"count": 0}  # how many analyses ran (tests read it: the cache is used)


def fingerprint(model: nn.Module) -> str:
    """What the model computes, cheaply: module types, tensor names, shapes, dtypes, devices and a
    strided sample of each tensor's values (the same weights in a fresh copy give the same print)."""
    digest = hashlib.sha1()
    for name, module in model.named_modules():
        digest.update(f"{name}:{type(module).__qualname__};".encode())
    for name, t in model.state_dict(keep_vars=True).items():
        if not isinstance(t, torch.Tensor):
            digest.update(f"{name}:{type(t).__name__};".encode())
            continue
        t = t.detach()
        digest.update(f"{name}:{tuple(t.shape)}:{t.dtype}:{t.device};".encode())
        if t.numel() and not t.is_quantized and not t.dtype.is_complex:
            flat = t.reshape(-1)
            sample = flat[:: max(1, flat.numel() // 4096)].double()
            digest.update(f"{sample.sum().item():.10e},{sample.abs().sum().item():.10e};".encode())
    return digest.hexdigest()


def _inputs_print(batches: list[tuple]) -> str:
    digest = hashlib.sha1()
    for batch in batches:
        for t in tensor_leaves(batch):
            digest.update(f"{tuple(t.shape)}:{t.dtype}:{t.double().sum().item():.10e};".encode())
    return digest.hexdigest()


def calibration_batches(ctx: TransformContext) -> list[tuple]:
    """The calibration inputs (never the verification ones): the context's, else the workload's
    example inputs; decoders: a prefill of a seeded prompt of the workload's prompt length."""
    if ctx.calibration_inputs:
        return list(ctx.calibration_inputs)
    spec = ctx.workload.decoder
    if spec is not None:
        from agnitra.models.generate import random_prompt

        tokens = random_prompt(spec.batch, spec.prompt_len, spec.vocab_size, 1234, ctx.device)
        return [(tokens, torch.arange(spec.prompt_len, device=ctx.device))]
    return [ctx.workload.example_inputs]


def _fresh_caches(model: nn.Module, ctx: TransformContext) -> None:
    """Decoders: the scratch copy gets its own KV cache (the shared one is the user's)."""
    spec = ctx.workload.decoder
    if spec is None:
        return
    for module in model.modules():
        if hasattr(type(module), "setup_caches"):
            module.setup_caches(spec.batch, spec.max_seq_len)
            return


def _outputs(model: nn.Module, batches: list[tuple]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t.detach().double() for batch in batches for t in tensor_leaves(model(*batch)) if t.is_floating_point()]


def relative_error(outputs: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """||y - y_ref|| / ||y_ref|| over all floating output leaves (inf where y is not finite)."""
    num = sum(float((o - r).square().sum()) for o, r in zip(outputs, reference))
    den = sum(float(r.square().sum()) for r in reference)
    return math.sqrt(num / den) if den > 0 and math.isfinite(num) else math.inf


def linear_groups(model: nn.Module, fmt: Format, min_features: int, skip: str) -> tuple[list[tuple[str, ...]], dict[str, int]]:
    """The plain Linears and Conv1Ds `fmt` can convert, each as the names it is reached by (a layer
    used twice is one group), in model order; and why the others are left out."""
    patterns = q.skip_patterns(skip)
    groups: dict[int, list[str]] = {}
    unfit: dict[str, int] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if not q.is_quantisable(module):
            continue
        reason = q._skip_reason(name, module, min_features, patterns, fmt.fits(), module.weight.device, module.weight.dtype)
        if reason is None:
            groups.setdefault(id(module), []).append(name)
        else:
            unfit[reason] = unfit.get(reason, 0) + 1
    return [tuple(names) for names in groups.values()], unfit


def _swap(model: nn.Module, names: tuple[str, ...], module: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """Put `module` at each of `names`; returns what to put back."""
    undo = []
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        undo.append((parent, child, parent._modules[child]))
        setattr(parent, child, module)
    return undo


def sensitivity(model: nn.Module, ctx: TransformContext, fmt: Format, min_features: int = 16, skip: str = "") -> Sensitivity:
    """Each quantisable Linear of `model` alone in `fmt`: the output error it causes on the
    calibration inputs, largest first. `model` is read, never changed (the runs use a scratch copy);
    cached per (model fingerprint, calibration inputs, format, selection) within the process."""
    from agnitra.transforms.patcher import structural_copy

    batches = calibration_batches(ctx)
    key = (fingerprint(model), _inputs_print(batches), fmt, min_features, skip, str(ctx.device))
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    scratch = structural_copy(model)
    _fresh_caches(scratch, ctx)
    groups, unfit = linear_groups(scratch, fmt, min_features, skip)
    reference = _outputs(scratch, batches)
    build = fmt.build()
    scores = []
    for names in groups:
        linear = scratch.get_submodule(names[0])
        undo = _swap(scratch, names, build(linear))
        try:
            scores.append((names, relative_error(_outputs(scratch, batches), reference)))
        finally:
            for parent, child, original in undo:
                setattr(parent, child, original)
    scores.sort(key=lambda s: -s[1])  # stable: model order among equals
    result = Sensitivity(scores, unfit, len(batches))
    _ANALYSES["count"] += 1
    _CACHE[key] = result
    while len(_CACHE) > CACHE_ENTRIES:
        _CACHE.popitem(last=False)
    return result


@dataclass
class Plan:
    """Which format each layer got, from a sensitivity ranking and a policy."""

    formats: dict[str, str]  # qualified name -> format label ("keep" stays as it is)
    high: list[tuple[str, float]]  # the layers kept high, most sensitive first, with their error
    low_count: int
    unfit_low: dict[str, int]
    kept_unfit_high: list[str]  # chosen for `high` but `high` does not fit them: left as they are


def plan(model: nn.Module, ctx: TransformContext, params) -> Plan:
    low, high = _formats(params)
    ranking = sensitivity(model, ctx, low, params.min_features, params.skip)
    n_high = _kept(params, [error for _, error in ranking.ranked])
    high_fits = None if high is None else high.fits()
    formats, kept_high, unfit_high = {}, [], []
    for i, (names, error) in enumerate(ranking.ranked):
        if i < n_high:
            kept_high.append((names[0], error))
            label = "keep"
            if high is not None:
                layer = model.get_submodule(names[0])
                if high_fits(in_features(layer), out_features(layer), layer.weight.device, layer.weight.dtype) is None:
                    label = high.label()
                else:
                    unfit_high.append(names[0])
        else:
            label = low.label()
        for name in names:
            formats[name] = label
    return Plan(formats, kept_high, len(ranking.ranked) - n_high, ranking.unfit, unfit_high)


def _kept(params, errors: list[float]) -> int:
    """How many of the ranked layers (largest error first) stay high."""
    if params.error_budget <= 0:
        return math.ceil(params.keep_fraction * len(errors) - 1e-9)
    for n in range(len(errors) + 1):
        if math.sqrt(sum(e * e for e in errors[n:])) <= params.error_budget:
            return n
    return len(errors)


def _formats(params) -> tuple[Format, Format | None]:
    low = Format(params.low, params.group_size)
    high = None if params.high == "keep" else Format(params.high, params.group_size)
    return low, high


# --------------------------------------------------------------------------------------------
# the transform
# --------------------------------------------------------------------------------------------


def _prior(low: str, high: str, fraction: float, ctx: TransformContext) -> float:
    """The speedup expected: the time a token spends in the layers, each share at its format's
    prior (the priors of the single-format transforms)."""
    cuda, decoder = ctx.device.type == "cuda", ctx.decoder
    alone = {
        "int8": 2.4 if decoder and cuda else 1.6 if decoder else 1.1,
        "int4": 2.0 if decoder else 1.0,
        "fp8": 1.5 if cuda else 1.0,
        "dynamic-int8": 1.6 if ctx.device.type == "cpu" and ctx.dtype == torch.float32 else 1.0,
        "keep": 1.0,
    }
    if cuda and decoder:
        alone["int4"] = 2.6  # reads half of int8's bytes; the single transform's 2.0 prices in its quality risk
    return 1.0 / ((1 - fraction) / alone[low] + fraction / alone[high])


@register_transform
class MixedPrecision(Transform):
    name = "mixed-precision"
    description = "a weight format per nn.Linear / Conv1D: the most output-sensitive share (measured one layer at a time on calibration inputs) kept at a higher precision, the rest quantised"
    requires = "what its formats need (int4/int8 weight-only, fp8 on CUDA 8.9+, dynamic int8 on an fp32 CPU model); Linear and Conv1D layers only"

    @dataclass
    class Params:
        low: str = "int4"  # int4 | fp8 | int8 | dynamic-int8
        group_size: int = 128  # int4's group of input features
        high: str = "keep"  # keep (the layer's own dtype) | int8 | fp8
        keep_fraction: float = 0.1  # share of the quantisable layers kept at `high`, most sensitive first
        error_budget: float = 0.0  # above 0: keep the fewest layers high that bring the rest within it (keep_fraction unused)
        min_features: int = 16
        skip: str = ""

    order = 30
    acts_on = frozenset({"matmul"})
    exclusive = "weight-format"

    def lossy(self, params: dict) -> bool:
        return True

    def __init__(self) -> None:
        self._plans: dict[tuple, Plan] = {}  # what apply() chose, for notes()

    def choices(self, ctx: TransformContext) -> list[Choice]:
        cuda = ctx.device.type == "cuda"
        policies = [("int4", g, h) for g in (32, 64, 128) for h in (("keep", "int8", "fp8") if cuda else ("keep", "int8"))]
        policies += [("fp8", 128, "keep"), ("fp8", 128, "int8"), ("int8", 128, "keep")] if cuda else [("int8", 128, "keep"), ("dynamic-int8", 128, "keep")]
        out = []
        for low, group, high in policies:
            share = [(("keep_fraction", f),) for f in KEEP_FRACTIONS] + [(("keep_fraction", 0.0), ("error_budget", b)) for b in ERROR_BUDGETS]
            for how in share:
                # an error budget keeps an unknown share high: priced as a fifth of the layers
                fraction = how[0][1] if len(how) == 1 else 0.2
                prior = _prior(low, high, fraction, ctx) * (1.0 - 0.01 * (128 - group) / 32)  # smaller groups: more scales to read
                out.append(Choice(self.name, (("low", low), ("group_size", group), ("high", high), *how), round(prior, 4)))
        return out

    def conflict(self, params, others: list[Step], ctx: TransformContext) -> str | None:
        if params.low == "dynamic-int8" and any(s.transform == "precision" for s in others):
            return "dynamic int8 quantises an fp32 model's Linears; precision would change them first"
        return None

    def prior_factor(self, params, others: list[Step], ctx: TransformContext) -> float:
        return 1.0 if params.low == "dynamic-int8" else q.cpu_weight_only_factor(others, ctx)

    def check(self, ctx: TransformContext, params) -> None:
        check(params.low in LOW_FORMATS, f"mixed-precision low must be one of {', '.join(LOW_FORMATS)}, not {params.low!r}")
        check(params.high in HIGH_FORMATS, f"mixed-precision high must be one of {', '.join(HIGH_FORMATS)}, not {params.high!r}")
        check(_RANK[params.high] > _RANK[params.low], f"mixed-precision high={params.high} keeps no more precision than low={params.low}")
        check(params.group_size in q.INT4_GROUP_SIZES, f"int4 group_size must be one of {', '.join(map(str, q.INT4_GROUP_SIZES))}, not {params.group_size}")
        check(0.0 <= params.keep_fraction <= 1.0, f"keep_fraction is a share of the layers, from 0 to 1, not {params.keep_fraction}")
        check(params.error_budget >= 0.0, f"error_budget is a relative output error, 0 (unused) or more, not {params.error_budget}")
        check(params.min_features >= 1, "mixed-precision: min_features must be at least 1")
        low, high = _formats(params)
        for role, fmt in (("low", low), ("high", high)):
            if fmt is None:
                continue
            try:
                fmt.check(ctx, params.min_features, params.skip)
            except NotApplicable as exc:
                raise NotApplicable(f"mixed-precision {role}={fmt.label()}: {exc}") from exc

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        chosen = plan(model, ctx, params)
        low, high = _formats(params)
        builders = {low.label(): low.build()}
        if high is not None:
            builders[high.label()] = high.build()
        built: dict[int, nn.Module] = {}

        def make(name: str, module: nn.Module) -> nn.Module:
            if id(module) not in built:
                built[id(module)] = builders[chosen.formats[name]](module)
            return built[id(module)]

        count = replace_modules(model, lambda n, m: chosen.formats.get(n, "keep") != "keep" and q.is_quantisable(m), make)
        if not count and not chosen.high:
            raise NotApplicable(f"mixed-precision: no nn.Linear or Conv1D layer to convert to {low.label()} ({q.Selection([], chosen.unfit_low).describe()})")
        if not count:  # high=keep and every layer kept: the recipe would be the model as it was, under another name
            policy = f"error_budget={params.error_budget:g}" if params.error_budget > 0 else f"keep_fraction={params.keep_fraction:g}"
            raise NotApplicable(f"mixed-precision: {policy} keeps all {len(chosen.high)} layer(s) in their own dtype, none in {low.label()}: the model is unchanged"
                                f" (raise error_budget or lower keep_fraction)")
        self._plans[self._plan_key(ctx, params)] = chosen
        while len(self._plans) > CACHE_ENTRIES:
            self._plans.pop(next(iter(self._plans)))
        logger.info("mixed-precision: %s", self._describe(chosen, params))
        return model

    def notes(self, ctx: TransformContext, params) -> list[str]:
        chosen = self._plans.get(self._plan_key(ctx, params))
        if chosen is None:
            return []
        notes = [f"mixed-precision: {self._describe(chosen, params)}"]
        if any(isinstance(m, nn.Conv2d) for m in ctx.workload.model.modules()):
            notes.append("mixed-precision: convolutions keep their dtype (the weight quantisers here serve nn.Linear and Conv1D only)")
        return notes

    @staticmethod
    def _plan_key(ctx: TransformContext, params) -> tuple:
        return (id(ctx.workload.model), str(ctx.device), astuple(params))

    @staticmethod
    def _describe(chosen: Plan, params) -> str:
        low, high = _formats(params)
        high_label = "its own dtype" if high is None else high.label()
        shown = chosen.high[:12]
        layers = ", ".join(f"{name} ({error:.2g})" for name, error in shown) or "none"
        if len(chosen.high) > len(shown):
            layers += f" and {len(chosen.high) - len(shown)} more"
        text = (f"{len(chosen.high)} Linear layer(s) kept at {high_label}, most sensitive first with the relative output error"
                f" each caused alone in {low.label()}: {layers}; {chosen.low_count} in {low.label()}")
        if chosen.kept_unfit_high:
            text += f"; {len(chosen.kept_unfit_high)} of the kept ones stay in their own dtype ({high_label} does not fit them)"
        if chosen.unfit_low:
            text += f"; left as they are: {q.Selection([], chosen.unfit_low).describe()}"
        return text


def plan_of(ctx: TransformContext, params: Any) -> Plan | None:
    """The plan the last apply() of these parameters made on this workload (tests, reports)."""
    transform = get_transform(MixedPrecision.name)
    return transform._plans.get(MixedPrecision._plan_key(ctx, params))

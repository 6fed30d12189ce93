"""Transforms: typed, composable changes to a model, each able to say why it does not apply.

A transform has a `Params` dataclass (its typed parameters, defaults included), `check()` that
raises `NotApplicable(reason)` when it cannot run here (device, dtype, op mix, torch version),
and `apply()` that returns a changed model **without touching the original**: it works on the
structural copy the patcher hands it, replacing submodules, parameters and buffers there only.
A new transform is one new file in this package and one `@register_transform`.

A transform also says what the search should know of it (`search/space.py` asks, and knows no
transform by name): the `choices()` of parameters worth measuring on a workload and device, each
with a prior (the speedup expected from it alone), its place among module transforms (`order`),
the IR op kinds it changes (`acts_on`: none in the captured graph, and it is not searched), the
group of transforms it excludes (`exclusive`), and why it cannot share a recipe with others
(`conflict()`) or what it does together with them (`prior_factor()`).
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from agnitra.errors import NotApplicable, UserError
from agnitra.transforms.recipe import Step
from agnitra.workloads.base import Workload


@dataclass
class TransformContext:
    """What a transform may look at: the workload (original model), device, calibration data."""

    workload: Workload
    device: torch.device
    calibration_inputs: list[tuple] = field(default_factory=list)  # never the verification inputs
    op_kinds: frozenset[str] | None = None  # the IR op kinds of the captured graph (None: not captured)

    @property
    def decoder(self) -> bool:
        return self.workload.decoder is not None

    @property
    def dtype(self) -> torch.dtype:
        return self.workload.dtype


@dataclass
class NoParams:
    """For transforms without parameters."""


@dataclass(frozen=True)
class Choice:
    """One way to use a transform here: fixed parameters, and the speedup the rules expect from it
    alone (a prior; the learned cost model of a later stage replaces these)."""

    transform: str
    params: tuple[tuple[str, Any], ...] = ()
    prior: float = 1.0

    def step(self) -> Step:
        transform = get_transform(self.transform)
        return Step(self.transform, dataclasses.asdict(transform.parse_params(dict(self.params))))

    def label(self) -> str:
        return Step(self.transform, dict(self.params)).label()


class Transform(abc.ABC):
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    requires: ClassVar[str] = ""  # what it needs, for `--list-transforms`
    Params: ClassVar[type] = NoParams
    # "module": changes submodules/weights; "runtime": wraps how the model is run (compile,
    # CUDA graphs, threads); "backend": hands the model to another runtime (ONNX Runtime)
    stage: ClassVar[str] = "module"
    # what the search knows of it (see the module's docstring)
    order: ClassVar[int] = 50  # place among the module transforms of a recipe: lower runs first
    acts_on: ClassVar[frozenset[str]] = frozenset()  # IR op kinds it changes; empty: any graph
    exclusive: ClassVar[str] = ""  # transforms naming the same group never share a recipe

    def choices(self, ctx: TransformContext) -> list[Choice]:
        """The parameters worth measuring on this workload and device, each with its prior.
        Default: the default parameters, no expectation."""
        return [Choice(self.name)]

    def conflict(self, params: Any, others: list[Step], ctx: TransformContext) -> str | None:
        """Why this step cannot share a recipe with `others` (None: it can)."""
        return None

    def lossy(self, params: dict) -> bool:
        """Whether it changes the numbers beyond float rounding (a weight format, a lower
        precision): where a recipe fails verification, the suspects. Default: no."""
        return False

    def prior_factor(self, params: Any, others: list[Step], ctx: TransformContext) -> float:
        """What this step does together with `others`, beyond the product of their priors."""
        return 1.0

    def check(self, ctx: TransformContext, params: Any) -> None:
        """Raise NotApplicable(reason) when this transform cannot run here. Default: always runs.

        Check the parameters' values before looking at `ctx`: a check that fails without the
        context is about the parameters, and `parse_params` reports it as the user's error when
        the recipe is read (see there)."""

    @abc.abstractmethod
    def apply(self, model: nn.Module, ctx: TransformContext, params: Any) -> nn.Module:
        """Return the transformed model; `model` is the patcher's copy, never the user's."""

    def notes(self, ctx: TransformContext, params: Any) -> list[str]:
        """What the report should say about how this transform ran here (a feature it turned off,
        and why). Default: nothing."""
        return []

    def default_params(self) -> Any:
        return self.Params()

    def parse_params(self, raw: dict[str, Any] | None) -> Any:
        """Params from a plain dict (recipe.json, an inline recipe): user errors for unknown keys,
        wrong types (a bool is not a number) and values the transform refuses whatever the context.

        The values are checked by running `check` against a context that cannot be read: a
        NotApplicable raised before the check reads it depends on the parameters alone (e.g.
        compile's mode); the first read ends the probe (device, dtype and model are judged
        later, where the recipe runs)."""
        if not isinstance(raw, (dict, type(None))):
            raise UserError(f"transform '{self.name}': parameters must be key=value pairs, not {type(raw).__name__}")
        raw = dict(raw or {})
        known = {f.name: f for f in dataclasses.fields(self.Params)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise UserError(f"transform '{self.name}' has no parameter(s) {', '.join(unknown)}; it takes: {', '.join(known) or 'none'}")
        params = self.Params(**raw)
        for name in known:
            value = getattr(params, name)
            expected = type(getattr(self.Params(), name))
            if value is not None and expected is not type(None) and not _is_a(value, expected):
                raise UserError(f"transform '{self.name}': parameter {name}={value!r} should be {expected.__name__}")
        self._check_values(params)
        return params

    def _check_values(self, params: Any) -> None:
        try:
            self.check(_UnreadableContext(), params)
        except NotApplicable as exc:
            raise UserError(f"transform '{self.name}': {exc}") from exc
        except _ContextRead:
            pass  # the rest of the check needs the context: judged where the recipe runs
        except Exception:  # noqa: BLE001 - a check that trips over the probe is not the user's error
            pass


def _is_a(value: Any, expected: type) -> bool:
    """isinstance, where an int passes for a float and a bool does not pass for a number."""
    if isinstance(value, bool) and expected is not bool:
        return False
    return isinstance(value, expected) or (expected is float and isinstance(value, int))


class _ContextRead(BaseException):
    """The probe's check read its context (a BaseException: a check's own `except Exception` lets it through)."""


class _UnreadableContext:
    """The context `parse_params` probes checks with: reading anything from it ends the probe."""

    def __getattr__(self, name: str) -> Any:
        raise _ContextRead(name)


TRANSFORMS: dict[str, Transform] = {}


def register_transform(cls: type[Transform]) -> type[Transform]:
    if not cls.name or cls.name in TRANSFORMS:
        raise ValueError(f"transform name {cls.name!r} missing or registered twice")
    TRANSFORMS[cls.name] = cls()
    return cls


def get_transform(name: str) -> Transform:
    import agnitra.transforms  # noqa: F401  (registers the built-in transforms)

    if name not in TRANSFORMS:
        raise UserError(f"unknown transform '{name}'; see `agnitra optimize --list-transforms`")
    return TRANSFORMS[name]


def all_transforms() -> list[Transform]:
    import agnitra.transforms  # noqa: F401

    return list(TRANSFORMS.values())


def replace_modules(model: nn.Module, match, build) -> int:
    """Replace every submodule for which `match(name, module)` holds by `build(name, module)`.

    Works on the patcher's structural copy: the parent's `_modules` dict is its own, so the
    user's model keeps its modules. Returns how many were replaced.
    """
    count = 0
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if match(full, child):
                setattr(parent, child_name, build(full, child))
                count += 1
    return count

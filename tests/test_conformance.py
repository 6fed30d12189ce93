"""The conformance suites of agnitra.testing run over every registered transform and strategy, and
a toy transform registered here, in this file alone, is searched, verified and reported."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import agnitra
from agnitra.search.space import recipe_space
from agnitra.search.strategies.base import STRATEGIES
from agnitra.testing import check_strategy, check_transform
from agnitra.transforms.base import TRANSFORMS, Choice, Transform, TransformContext, all_transforms, register_transform
from agnitra.workloads.base import TaskKind, Workload

CPU = torch.device("cpu")


def _mlp() -> Workload:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16)).train()  # train mode: must stay so
    model[2].weight.requires_grad_(False)
    make = lambda seed: (torch.randn(4, 32, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("mlp", model, make(0), TaskKind.GENERIC, batch=4, make_inputs=make)


def _convnet() -> Workload:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)).eval()
    make = lambda seed: (torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("convnet", model, make(0), TaskKind.GENERIC, batch=2, make_inputs=make)


BUILT_IN = sorted(name for name, t in TRANSFORMS.items() if type(t).__module__.startswith("agnitra."))


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_transform_keeps_the_contract(name):
    transform = TRANSFORMS[name]
    said = check_transform(transform, _mlp(), CPU, calls=2) + check_transform(transform, _convnet(), CPU, calls=2)  # compile's 8 choices compiled 16 graphs
    assert said  # each choice either applied or said why not


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_keeps_the_contract(name, builtin_transforms_only):
    workload = _mlp()
    space, _ = recipe_space(TransformContext(workload, CPU), limit=64)  # the contract, not the scale: the full CPU space is ~1.6e4 recipes, which some strategies ask one by one
    asked = check_strategy(STRATEGIES[name], space)
    assert asked and len(asked) <= len(space)


def test_the_contract_catches_a_transform_that_changes_the_users_model():
    class Careless(Transform):
        name = "careless"

        def apply(self, model, ctx, params):
            with torch.no_grad():
                ctx.workload.model[0].weight.mul_(2)  # the user's tensors, not the copy's
            return model

    with pytest.raises(AssertionError, match=r"careless: the user's model changed \(0.weight\)"):
        check_transform(Careless(), _mlp(), CPU)


# ---- a new transform is one new file: here, this one -------------------------------------------


class _Scaled(nn.Module):
    def __init__(self, inner: nn.Module, factor: float) -> None:
        super().__init__()
        self.inner, self.factor = inner, factor

    def forward(self, x):
        return self.inner(x) * self.factor


@register_transform
class ToyScale(Transform):
    """Multiplies the output: factor 1.0 is the same model, factor 1.5 a wrong one."""

    name = "toy-scale"
    description = "scales the output (a test of the plugin path)"
    acts_on = frozenset({"matmul"})

    @dataclass
    class Params:
        factor: float = 1.0

    def choices(self, ctx):
        return [Choice(self.name, (("factor", 1.0),), 1.3), Choice(self.name, (("factor", 1.5),), 1.2)]

    def conflict(self, params, others, ctx):
        return "toy-scale stands alone" if any(s.transform == "channels-last" for s in others) else None

    def apply(self, model, ctx, params):
        return _Scaled(model, params.factor)


@register_transform
class ToyConvOnly(Transform):
    name = "toy-conv-only"
    description = "changes convolutions only"
    acts_on = frozenset({"conv"})

    def apply(self, model, ctx, params):
        return model


def test_a_transform_from_one_file_is_searched_verified_and_reported(tmp_path):
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["toy-scale", "toy-conv-only"], budget="60s", peers=[], out=tmp_path)
    by_name = {c.name: c for c in fast.report.candidates}
    assert list(by_name) == ["toy-scale(factor=1.0)", "toy-scale(factor=1.5)"]  # its own choices, in the order of its priors
    assert by_name["toy-scale(factor=1.0)"].passed and not by_name["toy-scale(factor=1.5)"].passed  # verified
    skipped = {s["transform"]: s["reason"] for s in fast.report.search["not_applicable"]}
    assert skipped == {"toy-conv-only": "the captured graph has no conv operations for it to change"}  # the IR says what can matter
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["name"] for c in report["candidates"]] == list(by_name)
    assert "toy-scale(factor=1.5)" in (tmp_path / "candidates.csv").read_text()


def test_conflicts_come_from_the_transforms_themselves():
    workload = _convnet()
    space, _ = recipe_space(TransformContext(workload, CPU, op_kinds=frozenset({"conv", "matmul"})), allowed={"toy-scale", "channels-last"})
    names = [c.recipe.name for c in space]
    assert "toy-scale(factor=1.0)" in names and "channels-last" in names
    assert not any("toy-scale" in n and "channels-last" in n for n in names)  # ToyScale.conflict
    assert all(t.name in TRANSFORMS for t in all_transforms())

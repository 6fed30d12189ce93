"""`layout`, the channel-order transform the search uses: it permutes a copy's channels (the same
function), lowers the error of the int4 step it serves, is refused without that step, and leaves
the user's model and the original tensors alone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agnitra.errors import UserError
from agnitra.search.space import recipe_space
from agnitra.transforms.base import TransformContext, get_transform
from agnitra.transforms.patcher import apply_recipe
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.base import TaskKind, Workload


def _mixed_ranges() -> Workload:
    """An MLP whose input channels alternate between two ranges 20x apart: int4 groups of
    consecutive channels each hold both, until they are reordered."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 16)).eval()
    with torch.no_grad():
        for layer in (model[0], model[2]):
            scale = torch.ones(layer.in_features)
            scale[::2] = 20.0
            layer.weight.mul_(scale)
    make = lambda seed: (torch.randn(32, 64, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("mixed", model, make(0), TaskKind.GENERIC, batch=32, make_inputs=make)


def _error(model: nn.Module, reference: nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        want = reference(x)
        return float((model(x) - want).norm() / want.norm())


def test_the_permuted_copy_computes_the_same_and_int4_after_it_loses_less(tmp_path, monkeypatch):
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path))
    workload = _mixed_ranges()
    original = {name: t.clone() for name, t in workload.model.state_dict().items()}
    ctx = TransformContext(workload, torch.device("cpu"))
    (x,) = workload.inputs(7)
    permuted = get_transform("layout").apply(_copy(workload), ctx, get_transform("layout").parse_params({"serves": "quant:int4:g32", "solve_seconds": 1.0}))
    assert _error(permuted, workload.model, x) < 1e-5  # the same function
    assert not torch.equal(permuted[0].weight, workload.model[0].weight)  # ... with its channels in another order
    int4 = apply_recipe(Recipe.of(("int4-weight-only", {"group_size": 32})), ctx).model
    ordered = apply_recipe(Recipe.of(("layout", {"serves": "quant:int4:g32", "solve_seconds": 1.0}), ("int4-weight-only", {"group_size": 32})), ctx).model
    assert _error(ordered, workload.model, x) < 0.95 * _error(int4, workload.model, x)
    assert all(torch.equal(t, original[name]) for name, t in workload.model.state_dict().items())  # the user's model as it was
    assert list((tmp_path / "layout").glob("*.json"))  # the orders kept for the next candidate or run


def _copy(workload: Workload) -> nn.Module:
    from agnitra.transforms.patcher import structural_copy

    return structural_copy(workload.model)


def test_it_is_searched_only_beside_the_weight_format_it_serves():
    ctx = TransformContext(_mixed_ranges(), torch.device("cpu"))
    space, _ = recipe_space(ctx, allowed={"layout", "int4-weight-only"})
    recipes = [[(s.transform, s.params) for s in c.recipe.steps] for c in space]
    with_layout = [r for r in recipes if r[0][0] == "layout"]
    assert with_layout and all(len(r) == 2 and r[1][0] == "int4-weight-only" for r in with_layout)
    assert all(f"g{r[1][1]['group_size']}" == r[0][1]["serves"].rsplit(":", 1)[1] for r in with_layout)  # the served group is the recipe's
    assert {r[0][1]["serves"] for r in with_layout} == {"quant:int4:g128", "quant:int4:g64", "quant:int4:g32"}  # 2:4 only on CUDA
    assert {r[0][1]["gather"] for r in with_layout} == {False, True}
    with pytest.raises(UserError, match=r"transform 'layout': serves='quant:int8': it orders channels for one step, quant:int4:gN or sparsity:2:4"):
        get_transform("layout").parse_params({"serves": "quant:int8"})


def test_a_bf16_model_is_permuted_too(tmp_path, monkeypatch):
    """bf16 sums in another order move the outputs by ~1e-2: the check allows what reassociation
    moves at the model's precision (the H200's bf16 tinylm-py was refused at float32's 1e-3)."""
    from agnitra.transforms.permutation.order import compute_eps, same_outputs

    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path))
    workload = _mixed_ranges()
    workload.model = workload.model.to(torch.bfloat16)
    workload.example_inputs = tuple(t.to(torch.bfloat16) for t in workload.example_inputs)
    workload.make_inputs = None
    transform = get_transform("layout")
    permuted = transform.apply(_copy(workload), TransformContext(workload, torch.device("cpu")), transform.parse_params({"serves": "quant:int4:g32", "solve_seconds": 0.5}))
    assert not torch.equal(permuted[0].weight, workload.model[0].weight)
    assert compute_eps(permuted) == torch.finfo(torch.bfloat16).eps
    x = workload.example_inputs[0]
    assert not same_outputs([workload.model(x)], [workload.model(x) * 1.5], compute_eps(permuted))  # a real change is still caught


def test_gather_gives_a_layer_no_free_order_reaches_its_own_and_the_weight_format_still_converts_it(tmp_path, monkeypatch):
    """The first layer reads the model's input, which no permutation may move: with gather=True it
    reads it through a gather in its own order, the int4 format converts the Linear behind the
    gather, and the user's model keeps its modules and tensors."""
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path))
    workload = _mixed_ranges()
    original = {name: t.clone() for name, t in workload.model.state_dict().items()}
    ctx = TransformContext(workload, torch.device("cpu"))
    (x,) = workload.inputs(7)
    layout = get_transform("layout")
    gathered = layout.apply(_copy(workload), ctx, layout.parse_params({"serves": "quant:int4:g32", "solve_seconds": 1.0, "gather": True}))
    assert type(gathered[0]).__name__ == "_Gather" and type(gathered[0].linear) is nn.Linear and _error(gathered, workload.model, x) < 1e-5
    recipe = lambda gather: Recipe.of(("layout", {"serves": "quant:int4:g32", "solve_seconds": 1.0, "gather": gather}), ("int4-weight-only", {"group_size": 32}))  # noqa: E731
    with_gather, without = (apply_recipe(recipe(g), ctx).model for g in (True, False))
    assert type(with_gather[0].linear).__name__ != "Linear"  # converted to the int4 format behind its gather
    assert _error(with_gather, workload.model, x) < _error(without, workload.model, x)
    assert type(workload.model[0]) is nn.Linear and all(torch.equal(t, original[name]) for name, t in workload.model.state_dict().items())
    from agnitra.errors import NotApplicable

    with pytest.raises(NotApplicable, match="no layer quant:int4:g128 fits reads a channel space other layers read too or one that cannot move"):
        layout.apply(_copy(workload), ctx, layout.parse_params({"serves": "quant:int4:g128", "solve_seconds": 1.0, "gather": True}))  # only the hidden layer fits: its own space

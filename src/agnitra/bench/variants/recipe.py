"""A recipe as a benchmark variant: what `optimize` measures and `bench --recipe` compares."""

from __future__ import annotations

import torch

from agnitra.bench.variants.base import Prepared, Variant
from agnitra.transforms.base import TransformContext
from agnitra.transforms.patcher import apply_recipe
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.base import Workload

CALIBRATION_SEEDS = range(100, 104)  # calibration inputs; verification uses the harness's held-out seed


class RecipeVariant(Variant):
    def __init__(self, recipe: Recipe, name: str | None = None) -> None:
        self.recipe = Recipe.from_dict(recipe.to_dict())  # parameters validated, defaults filled in
        self.name = name or recipe.name
        self.description = f"recipe: {recipe.name}"

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        calibration = [workload.inputs(seed) for seed in CALIBRATION_SEEDS] if workload.make_inputs else [workload.example_inputs]
        patched = apply_recipe(self.recipe, TransformContext(workload, device, calibration))
        arithmetic = _arithmetic(self.recipe)
        if workload.decoder is not None:
            return Prepared(model=patched.model, arithmetic=arithmetic, notes="; ".join(patched.notes), lossy=self.recipe.lossy)
        return Prepared(call=patched.model, model=patched.model, arithmetic=arithmetic, notes="; ".join(patched.notes), lossy=self.recipe.lossy)


def _arithmetic(recipe: Recipe) -> str:
    """Precision the roofline of the workload does not describe (int8/int4/fp8 arithmetic)."""
    names = {s.transform: s.params for s in recipe.steps}
    for transform, label in (("dynamic-int8", "int8"), ("int8-weight-only", "int8 weights"), ("int4-weight-only", "int4 weights"), ("fp8", "fp8"), ("sparsity-2of4", "2:4 sparse")):
        if transform in names:
            return label
    if names.get("onnxruntime", {}).get("int8"):
        return "int8"
    if "precision" in names:
        return names["precision"].get("dtype", "bf16")
    return ""

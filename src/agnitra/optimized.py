"""`OptimizedModel`: what `agnitra.optimize` returns, and `agnitra.load` rebuilds from a saved run.

A drop-in `nn.Module` (same call signature and outputs as the original) carrying its recipe and
report. `save(dir)` writes the recipe, the report and what is needed to rebuild it; `load(dir,
model)` applies the recipe to the original model again, so nothing but data is saved.

`load` applies only the recipe the run chose, to the model it was made for: recipe.json must be the
recipe recorded in the run's report.json (and agnitra.json), and the model must be the workload
recorded in agnitra.json (name, dtype, parameter names and shapes). A mismatch is a one-line
UserError naming both sides and the fix; nothing is applied.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agnitra._version import __version__
from agnitra.errors import UserError
from agnitra.models.generate import Generator
from agnitra.transforms.recipe import RECIPE_VERSION, Recipe
from agnitra.workloads.base import DecoderSpec, Workload

META = "agnitra.json"


class OptimizedModel(nn.Module):
    def __init__(self, model: nn.Module, recipe: Recipe, workload: Workload, report: Any = None) -> None:
        super().__init__()
        self.model = model  # a decoder's carries its own step functions (models.generate.step_functions)
        self.recipe = recipe
        self.report = report
        self._meta = _workload_meta(workload)

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None) -> torch.Tensor:
        """Decoders: prompt [B, T] -> [B, T + max_new_tokens] through the optimized decode step."""
        if self._meta.get("decoder") is None:
            raise UserError("generate() is for decoder workloads; call the model instead")
        return Generator(self.model, temperature, top_k).generate(prompt, max_new_tokens).tokens

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.recipe.save(directory / "recipe.json")
        meta = {**self._meta, "recipe": self.recipe.to_dict(), "agnitra": __version__, "torch": torch.__version__}
        (directory / META).write_text(json.dumps(meta, indent=2) + "\n")
        if self.report is not None and not (directory / "report.json").exists():
            (directory / "report.json").write_text(json.dumps(self.report.to_dict(), indent=2) + "\n")
        return directory


def _workload_meta(workload: Workload) -> dict:
    spec = workload.decoder
    return {
        "workload": workload.name,
        "source": workload.source,
        "task": workload.task.value,
        "dtype": str(workload.dtype).replace("torch.", ""),
        "weights": _weights(workload.model),
        "decoder": None if spec is None else {"batch": spec.batch, "prompt_len": spec.prompt_len, "max_new_tokens": spec.max_new_tokens, "vocab_size": spec.vocab_size},
    }


def _weights(model: nn.Module) -> dict:
    """How many parameters and a digest of their names and shapes: which model a recipe was made for."""
    shapes = sorted((name, tuple(p.shape)) for name, p in model.named_parameters())
    digest = hashlib.sha256(json.dumps(shapes).encode()).hexdigest()[:16]
    return {"count": sum(p.numel() for p in model.parameters()), "shapes": digest}


def load(directory: str | Path, model: nn.Module | str | Workload, example_inputs: tuple | None = None, device: str | torch.device | None = None, **load_options) -> OptimizedModel:
    """Rebuild an optimized model: the original (module, workload or zoo spec) plus the saved recipe."""
    from agnitra.workloads.prepare import prepare_workload
    from agnitra.transforms.base import TransformContext
    from agnitra.transforms.patcher import apply_recipe

    directory = Path(directory)
    recipe = Recipe.load(directory / "recipe.json")
    meta = _run_meta(directory)
    _check_recipe_of_run(directory, recipe, meta)
    options = {**_options_of_run(meta, model, load_options), **load_options}
    if isinstance(model, str):
        workload, dev = prepare_workload(model, device=device, **options)
    else:
        workload, dev = prepare_workload(model, example_inputs, device=device, **options)
        if meta.get("decoder") and workload.decoder is None and hasattr(workload.model, "setup_caches"):
            workload.decoder = DecoderSpec(**meta["decoder"])
    _check_workload_of_run(directory, meta, workload)
    patched = apply_recipe(recipe, TransformContext(workload, dev))
    return OptimizedModel(patched.model, recipe, workload)


def apply(model: nn.Module | str | Workload, recipe: Recipe | str, example_inputs: tuple | None = None, device: str | torch.device | None = None, **load_options) -> OptimizedModel:
    """Apply a recipe to a model, without searching or measuring: `agnitra.apply(model,
    "precision(dtype=bf16) + compile", (x,))`. The recipe is a `Recipe`, a recipe.json path or an
    inline recipe; the model a module (with its example inputs), a workload or a spec like
    `zoo:minilm`. The user's model is untouched: the answer is a drop-in copy."""
    from agnitra.transforms.base import TransformContext
    from agnitra.transforms.patcher import apply_recipe
    from agnitra.workloads.prepare import prepare_workload

    recipe = recipe if isinstance(recipe, Recipe) else Recipe.load_or_parse(recipe)
    if isinstance(model, str):
        workload, dev = prepare_workload(model, device=device, **load_options)
    else:
        workload, dev = prepare_workload(model, example_inputs, device=device, **load_options)
    patched = apply_recipe(recipe, TransformContext(workload, dev))
    return OptimizedModel(patched.model, recipe, workload)


def _run_meta(directory: Path) -> dict:
    path = directory / META
    if not path.is_file():
        raise UserError(f"{directory} has no {META}: not a folder written by agnitra optimize --out (or OptimizedModel.save); pass that folder")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is damaged ({type(exc).__name__}); re-run agnitra optimize --out {directory}") from exc
    if not isinstance(meta, dict):
        raise UserError(f"{path} is not what agnitra writes; re-run agnitra optimize --out {directory}")
    return meta


def _check_recipe_of_run(directory: Path, recipe: Recipe, meta: dict) -> None:
    """recipe.json is the recipe the run chose: as report.json and agnitra.json recorded it."""
    for name, recorded in _recorded_recipes(directory, meta):
        if recorded != recipe:
            raise UserError(
                f"{directory / 'recipe.json'} ({recipe.name}) is not the recipe the run chose ({recorded.name}, in {name}); "
                f"restore recipe.json from the run or re-run agnitra optimize --out {directory}"
            )


def _recorded_recipes(directory: Path, meta: dict) -> list[tuple[str, Recipe]]:
    recorded = []
    report_path = directory / "report.json"
    if report_path.is_file():
        try:
            report = json.loads(report_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"{report_path} is damaged ({type(exc).__name__}); re-run agnitra optimize --out {directory}") from exc
        if not isinstance(report, dict) or not isinstance(report.get("recipe"), dict):
            raise UserError(f"{report_path} records no chosen recipe; re-run agnitra optimize --out {directory}")
        recorded.append(("report.json", Recipe.from_dict({"version": RECIPE_VERSION, **report["recipe"]})))
    if isinstance(meta.get("recipe"), dict):
        recorded.append((META, Recipe.from_dict(meta["recipe"])))
    if not recorded:
        raise UserError(f"{directory} records no chosen recipe (no report.json): nothing to check recipe.json against; re-run agnitra optimize --out {directory}")
    return recorded


def _options_of_run(meta: dict, model, load_options: dict) -> dict:
    """What the run was made with, as load options: a decoder's sizes (zoo specs) and a cast dtype."""
    options = {}
    spec = meta.get("decoder") or {}
    if spec and isinstance(model, str):
        options.update(batch=spec.get("batch"), seq_len=spec.get("prompt_len"), tokens=spec.get("max_new_tokens"))
    if "dtype" not in load_options and meta.get("dtype") not in (None, "float32"):
        options["dtype"] = meta["dtype"]
    return options


def _check_workload_of_run(directory: Path, meta: dict, workload: Workload) -> None:
    """The model is the one the recipe was made for: name, dtype, parameter names and shapes."""
    made_for = {k: meta.get(k) for k in ("workload", "dtype", "weights") if k in meta}
    given = {k: v for k, v in _workload_meta(workload).items() if k in made_for}
    if given != made_for:
        differs = ", ".join(f"{k} {_shown(made_for[k])} vs {_shown(given.get(k))}" for k in made_for if given.get(k) != made_for[k])
        raise UserError(
            f"{directory} was optimized for {_describe(made_for)}, not this model ({differs}); "
            f"pass the model it was made for, or re-run agnitra optimize on this one"
        )


def _describe(meta: dict) -> str:
    count = (meta.get("weights") or {}).get("count")
    return f"{meta.get('workload', '?')} ({meta.get('dtype', '?')}" + (f", {count} parameters)" if count is not None else ")")


def _shown(value) -> str:
    if isinstance(value, dict):
        return f"{value.get('count')} parameters {value.get('shapes')}"
    return str(value)

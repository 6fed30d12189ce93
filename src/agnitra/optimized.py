"""`OptimizedModel`: what `agnitra.optimize` returns, and `agnitra.load` rebuilds from a saved run.

A drop-in `nn.Module` (same call signature and outputs as the original) carrying its recipe and
report. `save(dir)` writes the recipe, the report and what is needed to rebuild it; `load(dir,
model)` applies the recipe to the original model again, so nothing but data is saved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from agnitra._version import __version__
from agnitra.errors import UserError
from agnitra.models.generate import Generator, decode_one_token, prefill
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.base import DecoderSpec, Workload

META = "agnitra.json"


class OptimizedModel(nn.Module):
    def __init__(self, model: nn.Module, recipe: Recipe, workload: Workload, report: Any = None, decode_fn: Callable = decode_one_token, prefill_fn: Callable = prefill) -> None:
        super().__init__()
        self.model = model
        self.recipe = recipe
        self.report = report
        self.decode_fn = decode_fn
        self.prefill_fn = prefill_fn
        self._meta = _workload_meta(workload)

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None) -> torch.Tensor:
        """Decoders: prompt [B, T] -> [B, T + max_new_tokens] through the optimized decode step."""
        if self._meta.get("decoder") is None:
            raise UserError("generate() is for decoder workloads; call the model instead")
        return Generator(self.model, self.decode_fn, self.prefill_fn, temperature, top_k).generate(prompt, max_new_tokens).tokens

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.recipe.save(directory / "recipe.json")
        (directory / META).write_text(json.dumps({**self._meta, "agnitra": __version__, "torch": torch.__version__}, indent=2) + "\n")
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
        "decoder": None if spec is None else {"batch": spec.batch, "prompt_len": spec.prompt_len, "max_new_tokens": spec.max_new_tokens, "vocab_size": spec.vocab_size},
    }


def load(directory: str | Path, model: nn.Module | str | Workload, example_inputs: tuple | None = None, device: str | torch.device | None = None, **load_options) -> OptimizedModel:
    """Rebuild an optimized model: the original (module, workload or zoo spec) plus the saved recipe."""
    from agnitra.api import prepare_workload
    from agnitra.transforms.base import TransformContext
    from agnitra.transforms.patcher import apply_recipe

    directory = Path(directory)
    recipe = Recipe.load(directory / "recipe.json")
    meta = json.loads((directory / META).read_text()) if (directory / META).is_file() else {}
    if isinstance(model, str):
        spec = meta.get("decoder") or {}
        options = {"batch": spec.get("batch"), "seq_len": spec.get("prompt_len"), "tokens": spec.get("max_new_tokens")} if spec else {}
        workload, dev = prepare_workload(model, device=device, **{**options, **load_options})
    else:
        workload, dev = prepare_workload(model, example_inputs, device=device)
        if meta.get("decoder") and workload.decoder is None and hasattr(workload.model, "setup_caches"):
            workload.decoder = DecoderSpec(**meta["decoder"])
    patched = apply_recipe(recipe, TransformContext(workload, dev))
    return OptimizedModel(patched.model, recipe, workload, None, patched.decode_fn, patched.prefill_fn)

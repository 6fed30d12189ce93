"""Rows into feature vectors: the workload's static signature (`sig.*`), its hotspot features
(`hot.*`: time shares per op kind and the device's busy share, measured before the run's search;
missing where a run did not time them), the check the workload is verified by (`cmp:*`, one flag
per comparison: rel_error, top1, ...), the device's numeric signature (`dev.*`, log-scaled) and
kind, the batch, and the recipe: per transform whether it is
in the recipe and its position, each numeric parameter's value and each other parameter's value
as a flag. The vocabulary is fitted on the training rows and saved with the model; what the
training rows never had reads as zeros."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

SIG, HOT, DEV, CMP = "sig.", "hot.", "dev.", "cmp:"


@dataclass
class Featurizer:
    signature: list[str] = field(default_factory=list)
    device: list[str] = field(default_factory=list)
    recipe: list[str] = field(default_factory=list)  # "t:NAME", "p:NAME.PARAM", "v:NAME.PARAM=VALUE"
    hotspots: list[str] = field(default_factory=list)
    comparisons: list[str] = field(default_factory=list)

    @classmethod
    def fit(cls, rows: list[dict], recipes: list[list[dict]] | None = None) -> "Featurizer":
        """The vocabulary of the rows, and of `recipes` (steps) besides: a search's candidates,
        so that a model continued on their measurements (`CostModel.fit(base=)`) has their columns."""
        signature, hotspots, device = (sorted({k[len(p):] for r in rows for k, v in r.items() if k.startswith(p) and v is not None}) for p in (SIG, HOT, DEV))
        recipe: dict[str, None] = {}
        for steps in [steps_of(r) for r in rows] + list(recipes or []):
            for name in recipe_tokens(steps):
                recipe.setdefault(name, None)
        comparisons = sorted({r["comparison"] for r in rows if r.get("comparison")})
        return cls(signature, device, sorted(recipe), hotspots, comparisons)

    def names(self) -> list[str]:
        # the checks first: where one of them and a signature feature split the training rows
        # alike, the trees take the lower column, and the check is the cause (a transformer block
        # verified by top1 passes where one verified by rel_error fails); only P(pass) and the
        # quality change read them (`without_checks`)
        return ["device_is_cuda", "log2_batch", *(CMP + n for n in self.comparisons), *(SIG + n for n in self.signature), *(HOT + n for n in self.hotspots),
                *(DEV + n for n in self.device), "n_steps", *self.recipe]

    def without_checks(self, x: np.ndarray) -> np.ndarray:
        """`x` without the check columns: what speed, memory and setup are learned from (how a
        model is verified does not make it faster)."""
        return np.delete(x, np.s_[2:2 + len(self.comparisons)], axis=1) if self.comparisons else x

    def transform(self, rows: list[dict]) -> np.ndarray:
        index = {name: i for i, name in enumerate(self.recipe)}
        workload_part = [*(SIG + n for n in self.signature), *(HOT + n for n in self.hotspots)]
        first = 2 + len(self.comparisons)  # the workload part's first column
        base = first + len(workload_part) + len(self.device) + 1
        out = np.zeros((len(rows), base + len(self.recipe)), dtype=np.float64)
        for i, r in enumerate(rows):
            out[i, 0] = 1.0 if r.get("device_kind") == "cuda" else 0.0
            out[i, 1] = math.log2(r["batch"]) if r.get("batch") else np.nan
            for j, n in enumerate(self.comparisons):  # unknown: missing, not "not this check"
                out[i, 2 + j] = np.nan if not r.get("comparison") else float(r["comparison"] == n)
            for j, n in enumerate(workload_part):
                v = r.get(n)
                out[i, first + j] = np.nan if v is None else v
            for j, n in enumerate(self.device):
                v = r.get(DEV + n)
                out[i, first + len(workload_part) + j] = np.nan if v is None else math.log2(1 + abs(v))
            steps = steps_of(r)
            out[i, base - 1] = len(steps)
            for name, value in recipe_tokens(steps).items():
                if name in index:
                    out[i, base + index[name]] = value
        return out

    def transform_recipes(self, base: dict, recipes: list[list[dict]]) -> np.ndarray:
        """Feature rows of one workload (`base`: a row without a recipe) under each recipe: the
        workload's part computed once, only the recipe part per row (a search's whole space)."""
        out = np.tile(self.transform([dict(base, steps=[])])[0], (len(recipes), 1))
        index = {name: i for i, name in enumerate(self.recipe)}
        offset = 2 + len(self.signature) + len(self.hotspots) + len(self.comparisons) + len(self.device) + 1
        for i, steps in enumerate(recipes):
            out[i, offset - 1] = len(steps)
            for name, value in recipe_tokens(steps).items():
                j = index.get(name)
                if j is not None:
                    out[i, offset + j] = value
        return out

    def to_dict(self) -> dict:
        return {"signature": self.signature, "hotspots": self.hotspots, "comparisons": self.comparisons, "device": self.device, "recipe": self.recipe}

    @classmethod
    def from_dict(cls, doc: dict) -> "Featurizer":
        return cls(list(doc["signature"]), list(doc["device"]), list(doc["recipe"]), list(doc.get("hotspots", [])), list(doc.get("comparisons", [])))


def steps_of(row: dict) -> list[dict]:
    """A row's recipe steps: given as `steps`, else read from its `recipe` JSON (the row is not
    changed: a copy with another recipe must not inherit these steps)."""
    steps = row.get("steps")
    if steps is None:
        text = row.get("recipe") or "[]"
        steps = json.loads(text) if isinstance(text, str) else text
    return steps


def recipe_tokens(steps: list[dict]) -> dict[str, float]:
    """A recipe as named values: each transform's presence (its position, from 1), numeric and
    boolean parameters as numbers, other parameters as one flag per value."""
    tokens: dict[str, float] = {}
    for position, step in enumerate(steps, 1):
        name = step.get("transform", "")
        tokens[f"t:{name}"] = float(position)
        for key, value in sorted((step.get("params") or {}).items()):
            if isinstance(value, bool):
                tokens[f"p:{name}.{key}"] = 1.0 if value else 0.0
            elif isinstance(value, (int, float)):
                tokens[f"p:{name}.{key}"] = float(value)
            else:
                tokens[f"v:{name}.{key}={value}"] = 1.0
    return tokens

"""A recipe: an ordered list of transforms with parameters, saved as `recipe.json`.

Recipes are data, not code: rebuilt only from registered transform names and their declared
parameters (an allow-list), versioned so a saved recipe reloads in a later release.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agnitra.errors import UserError

RECIPE_VERSION = "agnitra.recipe/1"


@dataclass(frozen=True)
class Step:
    transform: str
    params: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        if not self.params:
            return self.transform
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.transform}({inner})"


@dataclass(frozen=True)
class Recipe:
    steps: tuple[Step, ...] = ()

    @property
    def name(self) -> str:
        return " + ".join(s.label() for s in self.steps) or "baseline"

    def key(self) -> str:
        """A stable identity (for resuming a run and deduplicating candidates)."""
        return json.dumps([[s.transform, s.params] for s in self.steps], sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECIPE_VERSION, "steps": [{"transform": s.transform, "params": dict(s.params)} for s in self.steps]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "Recipe":
        from agnitra.transforms.base import get_transform

        if not isinstance(doc, dict) or doc.get("version") != RECIPE_VERSION:
            raise UserError(f"not an {RECIPE_VERSION} recipe (version {doc.get('version') if isinstance(doc, dict) else None!r})")
        steps = []
        for raw in doc.get("steps", []):
            transform = get_transform(raw.get("transform", ""))
            params = transform.parse_params(raw.get("params"))  # validates names and types
            steps.append(Step(transform.name, dataclasses.asdict(params)))
        return cls(tuple(steps))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Recipe":
        path = Path(path)
        if not path.is_file():
            raise UserError(f"recipe file not found: {path}")
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); re-save the recipe") from exc
        return cls.from_dict(doc)

    @classmethod
    def parse(cls, text: str) -> "Recipe":
        """The label form back into a recipe: "triton-kernels(weights=int8) + compile(mode=reduce-overhead)"."""
        from agnitra.transforms.base import get_transform

        steps = []
        for part in (p.strip() for p in text.split("+")):
            name, _, inner = part.partition("(")
            if not name.strip() or (inner and not inner.endswith(")")):
                raise UserError(f"cannot read recipe step {part!r}; write it as name or name(key=value,...)")
            raw = dict(kv.split("=", 1) for kv in inner[:-1].split(",") if "=" in kv) if inner else {}
            transform = get_transform(name.strip())
            defaults = dataclasses.asdict(transform.Params())
            typed = {k.strip(): v.strip() if isinstance(defaults.get(k.strip()), str) else _scalar(v.strip()) for k, v in raw.items()}
            params = transform.parse_params(typed)
            steps.append(Step(transform.name, dataclasses.asdict(params)))
        return cls(tuple(steps))

    @classmethod
    def load_or_parse(cls, text: str) -> "Recipe":
        """A recipe.json path, or a recipe written inline."""
        return cls.load(text) if text.endswith(".json") or Path(text).is_file() else cls.parse(text)

    @classmethod
    def of(cls, *steps: str | tuple[str, dict]) -> "Recipe":
        """Recipe.of("precision", ("compile", {"mode": "max-autotune"}))"""
        built = [Step(s) if isinstance(s, str) else Step(s[0], dict(s[1])) for s in steps]
        return cls(tuple(built))


def _scalar(text: str) -> Any:
    """A parameter value as written inline: bool, int, float or string."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text

"""A recipe: an ordered list of transforms with parameters, saved as `recipe.json`.

Recipes are data, not code: rebuilt only from registered transform names and their declared
parameters (an allow-list), versioned so a saved recipe reloads in a later release.

Written inline a recipe is read strictly: `name` or `name(key=value,...)` joined by `+`, with
known keys, each once, values of the declared type that the transform accepts (a value may be
quoted, 'a,b', to hold commas). Anything else is a one-line UserError naming the step, the
problem and what the transform takes: `compile(max-autotune)` is refused, never run as
`compile` with its default mode.
"""

from __future__ import annotations

import dataclasses
import json
import re
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
        inner = ",".join(f"{k}={_written(v)}" for k, v in sorted(self.params.items()))
        return f"{self.transform}({inner})"


@dataclass(frozen=True)
class Recipe:
    steps: tuple[Step, ...] = ()

    @property
    def name(self) -> str:
        return " + ".join(s.label() for s in self.steps) or "baseline"

    def key(self) -> str:
        """A stable identity (for resuming a run and deduplicating candidates); computed once
        (a model-guided search reads the keys of a 10^4-recipe space at every ask)."""
        cached = self.__dict__.get("_key")
        if cached is None:
            cached = json.dumps([[s.transform, s.params] for s in self.steps], sort_keys=True)
            object.__setattr__(self, "_key", cached)
        return cached

    @property
    def lossy(self) -> bool:
        """Whether a step changes the numbers beyond float rounding (`Transform.lossy`)."""
        from agnitra.transforms.base import get_transform

        return any(get_transform(s.transform).lossy(dict(s.params)) for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECIPE_VERSION, "steps": [{"transform": s.transform, "params": dict(s.params)} for s in self.steps]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "Recipe":
        from agnitra.transforms.base import get_transform

        if not isinstance(doc, dict) or doc.get("version") != RECIPE_VERSION:
            raise UserError(f"not an {RECIPE_VERSION} recipe (version {doc.get('version') if isinstance(doc, dict) else None!r})")
        unknown = sorted(set(doc) - {"version", "steps"})
        if unknown or not isinstance(doc.get("steps", []), list):
            raise UserError(f"not an {RECIPE_VERSION} recipe: it holds {', '.join(unknown) or 'steps that are not a list'}; a recipe has version and a list of steps")
        steps = []
        for i, raw in enumerate(doc.get("steps", []), 1):
            if not isinstance(raw, dict) or set(raw) - {"transform", "params"}:
                raise UserError(f"recipe step {i} is not {{\"transform\": NAME, \"params\": {{...}}}}: {json.dumps(raw)[:80]}")
            transform = get_transform(raw.get("transform", ""))
            params = transform.parse_params(raw.get("params"))  # known names, declared types, accepted values
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
            doc = json.loads(path.read_text(), object_pairs_hook=_without_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); re-save the recipe") from exc
        except UnicodeDecodeError as exc:
            raise UserError(f"{path} is not text (UTF-8); re-save the recipe") from exc
        return cls.from_dict(doc)

    @classmethod
    def parse(cls, text: str) -> "Recipe":
        """The label form back into a recipe: "triton-kernels(weights=int8) + compile(mode=reduce-overhead)"."""
        if not text.strip():
            raise UserError("empty recipe; write steps joined by +, e.g. 'precision + compile(mode=max-autotune)'")
        parts = _split_outside(text, "+")
        for i, part in enumerate(parts, 1):
            if not part.strip():
                raise UserError(f"recipe {text.strip()!r}: step {i} is empty; join steps with one + between them, e.g. 'precision + compile'")
        return cls(tuple(_parse_step(part) for part in parts))

    @classmethod
    def load_or_parse(cls, text: str) -> "Recipe":
        """A recipe.json path, or a recipe written inline."""
        return cls.load(text) if text.endswith(".json") or Path(text).is_file() else cls.parse(text)

    @classmethod
    def of(cls, *steps: str | tuple[str, dict]) -> "Recipe":
        """Recipe.of("precision", ("compile", {"mode": "max-autotune"}))"""
        built = [Step(s) if isinstance(s, str) else Step(s[0], dict(s[1])) for s in steps]
        return cls(tuple(built))


def _without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UserError(f"a recipe file gives {', '.join(twice)} twice; keep one")
    return dict(pairs)


STEP = re.compile(r"\s*(?P<name>[A-Za-z0-9][\w.-]*)\s*(\((?P<inner>.*)\))?\s*\Z", re.S)
QUOTES = "'\""
NEEDS_QUOTES = re.compile(r"[\s,()+='\"]")


def _parse_step(part: str) -> Step:
    from agnitra.transforms.base import get_transform

    where = f"recipe step {part.strip()!r}"
    match = STEP.match(part)
    if not match:
        raise UserError(f"cannot read {where}; write it as name or name(key=value,...)")
    transform = get_transform(match["name"])
    raw = _step_params(match["inner"], where, transform) if match["inner"] is not None else {}
    params = transform.parse_params(raw)  # known keys, declared types, values the transform takes
    return Step(transform.name, dataclasses.asdict(params))


def _step_params(inner: str, where: str, transform) -> dict[str, Any]:
    """key=value pairs, each key once, each value typed as the transform's parameter is."""
    takes = _takes(transform)
    if not inner.strip():
        raise UserError(f"{where}: empty parentheses; write {transform.name} alone or {transform.name}(key=value,...); {takes}")
    defaults = dataclasses.asdict(transform.Params())
    raw: dict[str, Any] = {}
    for item in _split_outside(inner, ","):
        key, sep, value = (x.strip() for x in item.partition("="))
        if not sep or not key:
            raise UserError(f"{where}: {item.strip()!r} is not key=value; {takes}")
        if not value:
            raise UserError(f"{where}: {key}= has no value; {takes}")
        if key in raw:
            raise UserError(f"{where}: {key} is given twice; {takes}")
        value = _unquoted(value)
        raw[key] = value if isinstance(defaults.get(key), str) else _scalar(value)
    return raw


def _takes(transform) -> str:
    fields = dataclasses.fields(transform.Params)
    if not fields:
        return f"{transform.name} takes no parameters"
    defaults = ", ".join(f"{f.name}={_written(getattr(transform.Params(), f.name))}" for f in fields)
    return f"{transform.name} takes {', '.join(f.name for f in fields)} (defaults: {defaults})"


def _split_outside(text: str, separator: str) -> list[str]:
    """Split on `separator` where it is outside parentheses and quotes."""
    parts, current, depth, quote = [], [], 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in QUOTES:
            quote = ch
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        elif ch == separator and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in QUOTES:
        return value[1:-1]
    if any(q in value for q in QUOTES):
        raise UserError(f"unbalanced quote in recipe value {value!r}; quote the whole value, e.g. skip='a,b'")
    return value


def _written(value: Any) -> str:
    """A parameter value as a recipe label writes it: quoted where it holds , ( ) + = or spaces."""
    text = str(value)
    return f"'{text}'" if NEEDS_QUOTES.search(text) or not text else text


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

"""Lower layers never import higher ones (docs/ARCHITECTURE.md): checked by parsing imports."""

from __future__ import annotations

import ast
from pathlib import Path

import agnitra

ROOT = Path(agnitra.__file__).parent

# layer of each top-level package or module; a module may import only from layers <= its own
LAYERS = {
    "_version": 0, "errors": 0, "config": 0, "device": 0, "fileio": 0, "arguments": 0, "console_io": 0, "report.schema": 0, "report.units": 0,
    "models": 1,
    "workloads": 2, "ort": 2,
    "telemetry": 3,
    "ir": 4,
    "transforms": 5, "kernels": 5, "verify": 5,
    "bench": 6,
    "search": 7,
    "report": 8,
    "api": 9, "optimized": 9,
    "cli": 10, "__init__": 10,
}


def _layer(dotted: str) -> int:
    parts = dotted.split(".")
    for n in (2, 1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    raise KeyError(dotted)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agnitra"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("agnitra")]
    return [f[len("agnitra."):] for f in found if f != "agnitra"]


def test_no_module_imports_a_higher_layer():
    violations = []
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        own = _layer(module)
        for imported in _imports(path):
            if _layer(imported) > own:
                violations.append(f"{module} (layer {own}) imports {imported} (layer {_layer(imported)})")
    assert not violations, "\n".join(violations)

"""Imports go one way (docs/ARCHITECTURE.md): checked by parsing every import, function-level
ones included.

Each top-level module or package has a layer; a module may import only from lower layers, or
from its own package. Two packages never share a layer and import each other, and the CLI goes
through `api` and the report's renderers only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agnitra

ROOT = Path(agnitra.__file__).parent

# the same table as docs/ARCHITECTURE.md's "Layers"
LAYERS = {
    "_version": 0, "errors": 0, "config": 0, "device": 0, "fileio": 0, "arguments": 0, "console_io": 0, "results": 0, "pytree": 0,
    "models": 1, "ort": 1, "store": 1,
    "workloads": 2,
    "telemetry": 3,
    "ir": 4,
    "kernels": 5, "verify": 5,
    "transforms": 6,
    "bench": 7,
    "search": 8, "relayout": 8,
    "report": 9,
    "testing": 10,
    "optimized": 11, "gate": 11,
    "api": 12,
    "service": 13,
    "cli": 14, "__init__": 14, "__main__": 14,
}
FOUNDATION = 0  # modules of layer 0 may import each other (errors, config, results, ...)
CLI_MAY_IMPORT = {"api", "report", "results", "errors", "arguments", "console_io", "config", "_version", "service"}


def _top(dotted: str) -> str:
    return dotted.split(".")[0]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agnitra") and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("agnitra")]
    return [f[len("agnitra."):] for f in found if f != "agnitra"]


def violations(root: Path, layers: dict[str, int], cli_may_import: set[str]) -> list[str]:
    """Every import that goes up a layer, sideways between packages, or from the CLI past `api`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        own = _top(module)
        if own not in layers:
            found.append(f"{module} has no layer: add '{own}' to the layering table")
            continue
        for imported in _imports(path):
            target = _top(imported)
            if target == own:
                continue
            if target not in layers:
                found.append(f"{module} imports {imported}, which has no layer")
            elif layers[target] > layers[own]:
                found.append(f"{module} (layer {layers[own]}) imports {imported} (layer {layers[target]}): upward")
            elif layers[target] == layers[own] != FOUNDATION:
                found.append(f"{module} imports {imported}: sideways between packages of layer {layers[own]}")
            elif own == "cli" and target not in cli_may_import:
                found.append(f"cli imports {imported}: the CLI goes through api and the report's renderers")
    return found


def test_no_module_imports_a_higher_layer():
    assert not violations(ROOT, LAYERS, CLI_MAY_IMPORT), "\n".join(violations(ROOT, LAYERS, CLI_MAY_IMPORT))


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "agnitra"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_fails_on_an_upward_a_sideways_and_a_cli_import(tmp_path):
    layers = {"errors": 0, "models": 1, "workloads": 2, "kernels": 5, "verify": 5, "api": 12, "cli": 13}
    root = _package(tmp_path, {
        "errors.py": "",
        "models/llama.py": "from agnitra.errors import UserError\n",  # down: fine
        "workloads/base.py": "def f():\n    from agnitra.api import optimize\n",  # up, inside a function
        "kernels/ops.py": "import agnitra.verify.compare\n",  # sideways at layer 5
        "verify/compare.py": "from agnitra.models import llama\n",
        "api.py": "from agnitra.workloads.base import f\n",
        "cli.py": "from agnitra.api import optimize\nfrom agnitra.workloads.base import f\n",  # past api
    })
    found = violations(root, layers, {"api", "errors"})
    assert found == [
        "cli imports workloads.base: the CLI goes through api and the report's renderers",
        "kernels.ops imports verify.compare: sideways between packages of layer 5",
        "workloads.base (layer 2) imports api (layer 12): upward",
    ]
    assert violations(_package(tmp_path / "clean", {"errors.py": "", "models/a.py": "from agnitra.errors import X\n"}), layers, set()) == []

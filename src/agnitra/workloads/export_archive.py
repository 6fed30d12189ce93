"""What a torch.export archive (.pt2) would run when loaded, found before torch reads it.

`torch.export.load` runs code from an archive in more places than its graph's operators:

- pickled entries: weights and constants marked `use_pickle` (`torch.load(weights_only=False)`),
  custom and opaque objects (TorchScript's unpickler, `pickle.loads`), the sample inputs (a
  weights-only load that falls back to a full one);
- shape expressions (`expr_str`), parsed by `sympy.sympify`, which evaluates its text as Python;
- input guards (`guards_code`), compiled with `exec` when the program becomes a module, with the
  example inputs' string values and the input tree's key names pasted into them;
- tree specs (`in_spec`, `out_spec`), which may import a module by name;
- node targets, resolved by attribute lookup from the `torch` module;
- an AOTInductor package: a compiled shared library.

`untrusted_parts` reads the archive with `zipfile` and `json` alone and names each such part that
is not plain data: a pickled entry, compiled code, or text that is not the small grammar torch
itself writes (expressions over shape symbols, comparisons of input sizes, operator names).
An archive it finds nothing in is loaded with every remaining `torch.load` forced to weights only
(see `safe_load`).
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
import zlib
from typing import Any, Iterator

PAYLOAD_CONFIG = re.compile(r"data/(weights|constants)/[^/]+_(weights|constants)_config\.json\Z")
PROGRAM = re.compile(r"(models/[^/]+\.json|serialized_exported_program\.json)\Z")
COMPILED_CODE_DIRS = ("data/aotinductor/", "data/mtia/", "data/executorch/")
COMPILED_CODE_SUFFIXES = (".so", ".dll", ".dylib", ".pyd", ".cubin", ".hsaco")
PICKLED_OBJECT_PREFIXES = ("custom_obj", "opaque_obj")

# Shape expressions: what sympy's srepr and torch's shape functions print, over symbols s0, u1, ...
SHAPE_FUNCTIONS = frozenset(
    "Symbol Integer Float Rational Add Mul Pow Mod Max Min floor ceiling Abs sqrt Piecewise ExprCondPair "
    "Eq Ne Lt Le Gt Ge Equality Unequality StrictLessThan StrictGreaterThan LessThan GreaterThan And Or Not "
    "BooleanTrue BooleanFalse Infinity NegativeInfinity IntInfinity NegativeIntInfinity Zero One NegativeOne "
    "Half NaN ComplexInfinity FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv "
    "LShift RShift PowByNatural FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat "
    "TruncToInt RoundToInt RoundDecimal ToFloat Identity".split()
)
SHAPE_CONSTANTS = frozenset("oo zoo nan true false pi E int_oo".split())
SHAPE_SYMBOL = re.compile(r"[a-z]+[0-9]+\Z")  # s0, u3, zuf0: never a Python builtin or a sympy function
OPAQUE_SHAPE_FUNCTION = re.compile(r"(OpaqueUnaryFn|BitwiseFn)_[a-z_0-9]+\Z")
PLAIN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
PLAIN_NUMBER = re.compile(r"[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?\Z")

# Guards: comparisons of the inputs' sizes, as torch's Python printer writes them.
GUARD_FUNCTIONS = frozenset({"max", "min", "abs", "int", "float", "round"})
GUARD_MATH = frozenset({"inf", "isnan", "isinf", "floor", "ceil", "trunc", "sqrt", "log", "exp", "pow"})
GUARD_TENSOR_METHODS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})

# Node targets outside torch.ops the verifier lets through (torch/_export/verifier.py), by name.
TORCH_FUNCTIONS = frozenset({
    "torch.sym_int", "torch.sym_float", "torch.sym_ite", "torch.sym_max", "torch.sym_min", "torch.sym_not",
    "torch.sym_sqrt", "torch.sym_sum", "torch._C._set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled",
    "torch.amp.autocast_mode._enter_autocast", "torch.amp.autocast_mode._exit_autocast",
})
OPERATOR_TARGET = re.compile(r"(torch\.ops|_operator|math)(\._?[A-Za-z0-9][A-Za-z0-9_]*)+\Z")
TREE_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
DEFAULT_FACTORY_MODULES = frozenset({"builtins", "collections"})
GRAPH_STRING_INPUT = re.compile(r"[\w .,:/+-]*\Z")


class ArchiveCorrupt(Exception):
    """The archive cannot be read as a torch.export archive; the message says which part."""


def members(archive: zipfile.ZipFile) -> list[tuple[str, str]]:
    """(path inside its root folder, full name) of every entry, under whichever root folder.

    torch reads the entries under the first entry's folder; every folder is listed here, so no
    entry escapes the checks by sitting under another one.
    """
    return [(n.split("/", 1)[1] if "/" in n else n, n) for n in archive.namelist() if not n.endswith("/")]


def require_one_reading(archive: zipfile.ZipFile) -> None:
    """Refuse, as damaged, an archive Python's zipfile and torch's reader could read differently:
    two entries of one name (each reader may take another), bytes before the first entry."""
    names = archive.namelist()
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ArchiveCorrupt(f"it holds two entries named {twice[0]}")
    if names and min(info.header_offset for info in archive.infolist()) != 0:
        raise ArchiveCorrupt("bytes come before its first entry")


def untrusted_parts(archive: zipfile.ZipFile) -> list[str]:
    """What in the archive would run code or unpickle objects when torch loads it (empty: nothing)."""
    require_one_reading(archive)
    entries = members(archive)
    found = [f"compiled code ({path})" for path, _ in entries if _is_compiled_code(path)][:1]
    for path, name in entries:
        if PAYLOAD_CONFIG.match(path):
            found += _pickled_payloads(_read_json(archive, name, path))
        elif PROGRAM.match(path):
            found += _code_in_program(_read_json(archive, name, path))
    return found


def _is_compiled_code(path: str) -> bool:
    return path.startswith(COMPILED_CODE_DIRS) or path.lower().endswith(COMPILED_CODE_SUFFIXES)


def _read_json(archive: zipfile.ZipFile, name: str, path: str) -> Any:
    try:
        return json.loads(archive.read(name))
    except (ValueError, zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise ArchiveCorrupt(f"{path} is damaged ({type(exc).__name__})") from exc


def _pickled_payloads(config: Any) -> list[str]:
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise ArchiveCorrupt("a weights or constants table is not the layout torch.export.save writes")
    found = []
    for fqn, meta in entries.items():
        path_name = str(meta.get("path_name", "")) if isinstance(meta, dict) else ""
        if not isinstance(meta, dict) or meta.get("use_pickle") or path_name.startswith(PICKLED_OBJECT_PREFIXES):
            found.append(f"a pickled entry ({fqn})")
    return found


def _code_in_program(doc: Any) -> list[str]:
    found = []
    for part in _dicts(doc):
        found += _code_in_part(part)
    return found


def _code_in_part(part: dict) -> list[str]:
    """The fields of one JSON object of the program that torch evaluates, checked by their grammar."""
    found = []
    if "expr_str" in part and not _all_plain(part["expr_str"], is_plain_shape_expression):
        found.append(f"a shape expression that is not plain arithmetic ({_show(part['expr_str'])})")
    if "guards_code" in part and not (isinstance(part["guards_code"], list) and all(_all_plain(g, is_plain_guard) for g in part["guards_code"])):
        found.append(f"input guards that are not plain size comparisons ({_show(part['guards_code'])})")
    for key in ("in_spec", "out_spec"):
        if part.get(key) and not _all_plain(part[key], is_plain_tree_spec):
            found.append(f"an input/output tree that names Python objects ({_show(part[key])})")
    if "target" in part and "inputs" in part and not _all_plain(part["target"], is_known_operator):
        found.append(f"a node calling {_show(part['target'])}, which is not a torch operator")
    if "nodes" in part and isinstance(part.get("inputs"), list):
        found += [f"a string input {_show(s)}" for s in _graph_string_inputs(part["inputs"]) if not GRAPH_STRING_INPUT.match(s)]
    return found


def _all_plain(value: Any, is_plain) -> bool:
    return isinstance(value, str) and is_plain(value)


def _dicts(node: Any) -> Iterator[dict]:
    """Every JSON object in a document, outermost first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _dicts(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dicts(item)


def _graph_string_inputs(inputs: list) -> list[str]:
    return [v for arg in inputs if isinstance(arg, dict) for k, v in arg.items() if k == "as_string" and isinstance(v, str)]


def _show(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def is_known_operator(target: str) -> bool:
    """torch.ops.*, operator and math functions by plain names (no dunder hops), or the verifier's few."""
    return target in TORCH_FUNCTIONS or ("__" not in target and bool(OPERATOR_TARGET.match(target)))


def is_plain_shape_expression(text: str) -> bool:
    """sympy's printed form of arithmetic over shape symbols: calls of known functions only."""
    tree = _parse_expression(text)
    return tree is not None and all(_plain_shape_node(node, tree) for node in ast.walk(tree))


def _parse_expression(text: str) -> ast.Expression | None:
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return None


ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Tuple, ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def _plain_shape_node(node: ast.AST, tree: ast.Expression) -> bool:
    if isinstance(node, ARITHMETIC):
        return True
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and _is_shape_function(node.func.id) and all(isinstance(k.value, ast.Constant) for k in node.keywords)
    if isinstance(node, ast.keyword):
        return node.arg is not None and PLAIN_WORD.match(node.arg) is not None and not node.arg.startswith("_")
    if isinstance(node, ast.Name):
        return _is_shape_function(node.id) or node.id in SHAPE_CONSTANTS or SHAPE_SYMBOL.match(node.id) is not None
    if isinstance(node, ast.Constant):
        return _plain_constant(node.value)
    return False


def _is_shape_function(name: str) -> bool:
    return name in SHAPE_FUNCTIONS or OPAQUE_SHAPE_FUNCTION.match(name) is not None


def _plain_constant(value: Any) -> bool:
    if isinstance(value, str):
        return bool(PLAIN_WORD.match(value) or PLAIN_NUMBER.match(value))
    return value is None or isinstance(value, (bool, int, float))


def is_plain_guard(text: str) -> bool:
    """A comparison of input sizes: L['x'].size()[0] <= 64, max(...), math.floor(...), // and %."""
    tree = _parse_expression(text)
    return tree is not None and _plain_guard(tree.body)


def _plain_guard(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (bool, int, float))
    if isinstance(node, (ast.Compare, ast.BoolOp, ast.BinOp, ast.UnaryOp)):
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.operator, ast.unaryop, ast.boolop, ast.cmpop))]
        return all(_plain_guard(c) for c in children)
    if isinstance(node, ast.Attribute):
        return _is_math(node)
    if isinstance(node, ast.Subscript):
        return _is_input_access(node)
    if isinstance(node, ast.Call):
        return not node.keywords and _plain_guard_call(node)
    return False


def _plain_guard_call(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name) and func.id in GUARD_FUNCTIONS or _is_math(func):
        return all(_plain_guard(a) for a in node.args)
    return _is_input_access(node)


def _is_math(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in GUARD_MATH


def _is_input_access(node: ast.AST) -> bool:
    """L['x'], L['x'][0], L['x'].size()[1], L['x'].stride(): an input, indexed or sized."""
    if isinstance(node, ast.Name):
        return node.id == "L"
    if isinstance(node, ast.Subscript):
        key = node.slice
        plain_key = isinstance(key, ast.Constant) and (isinstance(key.value, int) or (isinstance(key.value, str) and PLAIN_WORD.match(key.value)))
        return bool(plain_key) and _is_input_access(node.value)
    if isinstance(node, ast.Call):
        func = node.func
        is_method = isinstance(func, ast.Attribute) and func.attr in GUARD_TENSOR_METHODS
        return is_method and not node.keywords and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in node.args) and _is_input_access(func.value)
    return False


def is_plain_tree_spec(text: str) -> bool:
    """A pytree spec naming registered container types, with plain key names and no imports."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return all(_plain_tree_node(node) for node in _dicts(doc) if "children_spec" in node)


def _plain_tree_node(node: dict) -> bool:
    kind, context = node.get("type"), node.get("context")
    if kind is not None and not (isinstance(kind, str) and TREE_TYPE.match(kind)):
        return False
    if context in (None, "null"):
        return True
    try:
        value = json.loads(context) if isinstance(context, str) else context
    except ValueError:
        return False
    return _plain_context(value)


def _plain_context(value: Any) -> bool:
    if isinstance(value, dict):
        if "__enum__" in value:
            return False
        if "default_factory_module" in value and value["default_factory_module"] not in DEFAULT_FACTORY_MODULES:
            return False
        return all(_plain_context(k) and _plain_context(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain_context(v) for v in value)
    return _plain_constant(value)

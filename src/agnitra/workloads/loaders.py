"""Turn what the user names into a Workload.

- `zoo:NAME`                      a built-in workload
- `gen:FAMILY-...`                a generated model (`workloads.generated`: MLPs, convnets, encoders)
- `path/to/file.py:factory`       factory() returns (model, example_inputs) or a Workload
- `model.pt2`                     a torch.export archive (example inputs saved inside)
- `model.pt` / `.ts` / `.torchscript`  TorchScript (or a model saved whole with torch.save, with
                                  --allow-pickle); input shapes from --input-shape
- `model.onnx`                    run through ONNX Runtime; shapes from the graph or --input-shape

Files are read without running code they carry unless `allow_pickle` says the user trusts them
(see `safe_load`). A flag that does not apply to the model source is refused, not ignored:
--batch/--seq-len/--tokens reach a factory only through parameters of those names.
Every failure a user can cause ends as a one-line WorkloadError naming the problem and the fix.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from agnitra.device import out_of_memory, out_of_memory_message
from agnitra.errors import NotApplicable, UserError, WorkloadError, first_line
from agnitra.pytree import fresh_copy
from agnitra.workloads import generated
from agnitra.workloads.base import TaskKind, Workload, tensor_leaves
from agnitra.workloads.registry import BuildOptions, build_workload, get_entry
from agnitra.workloads.safe_load import is_damaged_zip, is_torchscript, load_checkpoint, load_export_archive, load_torchscript, open_zip, quiet_library

TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript", ".jit")
MODEL_FILE_SUFFIXES = (".pt2", ".onnx", *TORCHSCRIPT_SUFFIXES)  # loaded the same way every time
USER_MODULE_PREFIX = "agnitra_user_"  # the name a user's model file is imported under
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32


def parse_input_shape(text: str) -> InputSpec:
    """'1x3x224x224' or '1x128:int64' -> InputSpec."""
    shape_text, _, dtype_text = text.strip().partition(":")
    if not re.fullmatch(r"\d+(x\d+)*", shape_text):
        raise UserError(f"bad --input-shape '{text}'; write dimensions joined by x with an optional dtype, e.g. 1x3x224x224 or 1x128:int64")
    dtype_name = dtype_text.strip().lower() or "float32"
    if dtype_name not in _DTYPES:
        raise UserError(f"unknown dtype '{dtype_text}' in --input-shape; use one of: {', '.join(sorted(_DTYPES))}")
    return InputSpec(tuple(int(d) for d in shape_text.split("x")), _DTYPES[dtype_name])


def random_inputs(specs: list[InputSpec], device: torch.device, seed: int) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for s in specs:
        if s.dtype.is_floating_point:
            t = torch.randn(s.shape, generator=gen).to(s.dtype)
        elif s.dtype == torch.bool:
            t = torch.ones(s.shape, dtype=torch.bool)
        else:  # token ids: small non-negative integers are valid for any vocabulary
            t = torch.randint(0, 100, s.shape, generator=gen, dtype=s.dtype)
        out.append(t.to(device))
    return tuple(out)


SIZE_FLAGS = ("batch", "seq_len", "tokens", "size")  # options a factory takes as parameters of these names


def load_workload(spec: str, options: BuildOptions, input_shapes: list[str] | None = None, task: str | None = None, allow_pickle: bool = False) -> Workload:
    """Resolve a model spec into a Workload on options.device."""
    shapes = [parse_input_shape(s) for s in input_shapes or []]
    if spec.startswith("zoo:"):
        workload = _from_zoo(spec[4:], options, shapes)
    elif spec.startswith(generated.PREFIX):
        refuse_flags(spec, ["input_shape"] if shapes else [], "a generated workload makes its own inputs (set --batch or --seq-len)")
        workload = generated.build(spec, options)
    else:
        path_text, sep, factory = spec.rpartition(":")
        if sep and path_text.endswith(".py"):
            workload = _from_factory(Path(path_text), factory, options, shapes)
        elif spec.endswith(".py"):
            raise UserError(f"'{spec}' names a Python file but no factory; write {spec}:FUNCTION (a function returning (model, example_inputs))")
        else:
            workload = _from_file(Path(spec), options, shapes, allow_pickle)
    return with_task(workload, task)


def with_task(workload: Workload, task: str | None) -> Workload:
    """--task: the task kind, and with it the comparison, replaced when given."""
    if task:
        workload.task = TaskKind(task)
        workload.comparison = ""
        workload.__post_init__()
    return workload


def on_device(inputs: tuple, device: torch.device) -> tuple:
    return tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(options: BuildOptions, names: tuple[str, ...] = SIZE_FLAGS) -> list[str]:
    """The size flags the user set: None means not given, and --size only counts when not "full"."""
    return [n for n in names if (options.size != "full" if n == "size" else getattr(options, n) is not None)]


def refuse_flags(source: str, unused: list[str], why: str) -> None:
    """A flag the model source has no use for is an error, not a silent no-op."""
    if unused:
        raise UserError(f"{flag(unused[0])} does not apply to {source}: {why}; drop {flag(unused[0])}")


def _from_zoo(name: str, options: BuildOptions, shapes: list[InputSpec]) -> Workload:
    entry = get_entry(name)
    source = f"zoo:{name}"
    refuse_flags(source, ["input_shape"] if shapes else [], "a zoo workload makes its own inputs (set --batch or --seq-len)")
    refuse_flags(source, ["seq_len"] if entry.task == TaskKind.CLASSIFIER and options.seq_len else [], "it classifies fixed-size inputs, with no sequence")
    workload = build_workload(name, options)
    refuse_flags(source, ["tokens"] if options.tokens and workload.decoder is None else [], "it is not a decoder generating tokens (--tokens sets new tokens per generation)")
    return workload


def _require_file(path: Path) -> None:
    if not path.exists():
        raise WorkloadError(f"model file not found: {path} (check the path, or use zoo:NAME for a built-in workload)")
    if path.is_dir():
        raise WorkloadError(f"{path} is a directory, not a model file; give a file (.pt2, .onnx, TorchScript) or file.py:factory")
    if not path.is_file():
        raise WorkloadError(f"{path} is not a regular file; give a model file (.pt2, .onnx, TorchScript) or file.py:factory")
    if path.stat().st_size == 0:
        raise WorkloadError(f"{path} is empty (0 bytes); save or copy the model again")


def _from_factory(path: Path, factory: str, options: BuildOptions, shapes: list[InputSpec]) -> Workload:
    _require_file(path)
    if not factory.isidentifier():
        raise UserError(f"bad factory name '{factory}' in '{path}:{factory}'; write path/to/file.py:function_name")
    source = f"{path}:{factory}"
    refuse_flags(source, ["input_shape"] if shapes else [], "the factory returns its own example inputs")
    fn = _import_function(path, factory)
    arguments = _factory_arguments(fn, source, options)
    try:
        made = fn(**arguments)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"{source}() raised {first_line(exc)}") from exc
    return _as_workload(made, source, options.device)


def _import_function(path: Path, factory: str):
    module_name = f"{USER_MODULE_PREFIX}{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - user code raises anything (SyntaxError included)
        raise WorkloadError(f"importing {path} failed: {first_line(exc)} (run it with python to see the error)") from exc
    fn = getattr(module, factory, None)
    if not callable(fn):
        available = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module_name)
        raise WorkloadError(f"{path} has no function '{factory}'; functions defined there: {', '.join(available) or 'none'}")
    return fn


def _factory_arguments(fn, source: str, options: BuildOptions) -> dict:
    """--batch/--seq-len/--tokens/--size as keyword arguments, where the factory has such a parameter."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C function: no parameters we can see
        parameters = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    arguments = {}
    for name in _given(options):
        accepted = takes_any or (name in parameters and parameters[name].kind is not inspect.Parameter.POSITIONAL_ONLY)
        if not accepted:
            raise UserError(f"{source} takes no '{name}' parameter; add one to it or drop {flag(name)}")
        arguments[name] = getattr(options, name)
    return arguments


def _as_workload(made, source: str, device: torch.device) -> Workload:
    if isinstance(made, Workload):
        workload = made
    elif isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        model, inputs = made
        inputs = inputs if isinstance(inputs, tuple) else (tuple(inputs) if isinstance(inputs, list) else (inputs,))
        workload = Workload(name=Path(source.split(":")[0]).stem, model=model, example_inputs=inputs, task=TaskKind.GENERIC)
    else:
        if isinstance(made, torch.nn.Module):  # a model without values is the first thing to fix
            refuse_meta(made, source)
        raise WorkloadError(f"{source} returned {type(made).__name__}; it must return (model, example_inputs) or an agnitra.Workload")
    workload.source = source
    refuse_meta(workload.model, source)
    workload.model = inference_mode(workload.model.to(device))
    workload.example_inputs = on_device(workload.example_inputs, device)
    first = next((t for t in workload.example_inputs if isinstance(t, torch.Tensor)), None)
    if first is not None and first.dim() > 0:
        workload.batch = first.shape[0]
    return workload


def out_of_memory_error(workload: Workload, error: BaseException | str) -> WorkloadError:
    """The original model ran out of memory on its own inputs: one line with the batch, what it asked
    for and the memory there is, and the fix (a smaller --batch)."""
    return WorkloadError(out_of_memory_message(workload.name, workload.batch, workload.device, error, from_python=workload.source == "python"))


def refuse_meta(model: torch.nn.Module, source: str | None = None) -> None:
    """A model whose parameters or buffers are on the meta device has shapes but no values: one
    line, before anything tries to move or run it."""
    empty = [name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if empty:
        shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        prefix = f"{source}: " if source else ""
        raise WorkloadError(f"{prefix}the model's parameters are on the meta device (no values: {shown}): load real weights first"
                            " (e.g. `model.to_empty(device=...)` then load a state dict)")


def inference_mode(model: torch.nn.Module) -> torch.nn.Module:
    try:
        return model.eval()
    except NotImplementedError:  # torch.export modules are fixed in inference form already
        return model


def _from_file(path: Path, options: BuildOptions, shapes: list[InputSpec], allow_pickle: bool) -> Workload:
    _require_file(path)
    suffix = path.suffix.lower()
    if suffix == ".pt2":
        return _from_pt2(path, options, shapes, allow_pickle)
    if suffix == ".onnx":
        return _from_onnx(path, options, shapes)
    if suffix in TORCHSCRIPT_SUFFIXES:
        return _from_torchscript(path, options, shapes, allow_pickle)
    raise WorkloadError(f"cannot tell what {path} is; use zoo:NAME, file.py:factory, *.pt2, *.onnx or TorchScript ({', '.join(TORCHSCRIPT_SUFFIXES)})")


def _from_pt2(path: Path, options: BuildOptions, shapes: list[InputSpec], allow_pickle: bool) -> Workload:
    unused = _given(options) + (["input_shape"] if shapes else [])
    refuse_flags(str(path), unused, "a .pt2 archive fixes its example inputs (export again with other example inputs to change them)")
    program = load_export_archive(path, allow_pickle)
    example = getattr(program, "example_inputs", None)
    if not example or not example[0]:
        raise WorkloadError(f"{path} holds no example inputs; export with torch.export.export(model, example_args) and save again")
    args, kwargs = example
    if kwargs:
        raise WorkloadError(f"{path} was exported with keyword inputs ({', '.join(kwargs)}); Agnitra needs positional example inputs")
    try:
        with quiet_library():
            model = program.module()
    except Exception as exc:  # noqa: BLE001 - torch raises anything on a program it cannot unlift
        raise WorkloadError(f"{path} holds a program torch cannot turn into a module ({first_line(exc)}); export and save it again") from exc
    return _as_workload((model, tuple(args)), str(path), options.device)


def _from_torchscript(path: Path, options: BuildOptions, shapes: list[InputSpec], allow_pickle: bool) -> Workload:
    refuse_flags(str(path), _given(options), "TorchScript input shapes come from --input-shape (write the batch into it, e.g. 8x3x224x224)")
    if not shapes:
        raise WorkloadError(f"{path} does not record input shapes; pass them, e.g. --input-shape 1x3x224x224 (one per input)")
    device = options.device
    model = _scripted_or_saved(path, device, allow_pickle)
    workload = _as_workload((model, random_inputs(shapes, device, 0)), str(path), device)
    workload.make_inputs = lambda seed: random_inputs(shapes, device, seed)
    return workload


def _scripted_or_saved(path: Path, device: torch.device, allow_pickle: bool) -> torch.nn.Module:
    """A TorchScript archive, else a model saved whole with torch.save (a zip or a legacy pickle)."""
    if is_damaged_zip(path):
        raise WorkloadError(f"{path} is a damaged zip archive (cut short, or its end is missing); save or copy the model again")
    if zipfile.is_zipfile(path):
        with open_zip(path, "TorchScript archive", "save it with torch.jit.save") as archive:
            if is_torchscript(archive):
                return load_torchscript(path, archive, device, allow_pickle)
    return load_checkpoint(path, device, allow_pickle)


def _from_onnx(path: Path, options: BuildOptions, shapes: list[InputSpec]) -> Workload:
    import onnx

    from agnitra.ort.session import OrtModule, input_specs, open_session

    refuse_flags(str(path), [n for n in _given(options) if n in ("tokens", "size")], "an ONNX graph is fixed: it has no decode loop and no size to pick")
    try:
        with quiet_library():
            onnx.checker.check_model(str(path))
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError, DecodeError, ...
        raise WorkloadError(f"{path} is not a valid ONNX model ({first_line(exc)}); re-export it") from exc
    try:
        session = open_session(path, options.device)
    except NotApplicable as exc:
        raise WorkloadError(f"cannot run {path} on {options.device.type}: {exc}") from exc
    graph_inputs = input_specs(session)
    _refuse_unused_sizes(path, options, shapes, graph_inputs)
    specs = shapes or [_spec_from_graph(name, dims, dtype, options) for name, dims, dtype in graph_inputs]
    if len(specs) != len(graph_inputs):
        raise WorkloadError(f"{path} takes {len(graph_inputs)} inputs ({', '.join(n for n, _, _ in graph_inputs)}) but {len(specs)} --input-shape were given")
    module = OrtModule(session, options.device, path=path)
    workload = _as_workload((module, random_inputs(specs, options.device, 0)), str(path), options.device)
    workload.make_inputs = lambda seed: random_inputs(specs, options.device, seed)
    return workload


def _refuse_unused_sizes(path: Path, options: BuildOptions, shapes: list[InputSpec], graph_inputs: list) -> None:
    """--batch/--seq-len fill an ONNX graph's symbolic dimensions; with none to fill they are refused."""
    if shapes:
        refuse_flags(str(path), _given(options, ("batch", "seq_len")), "--input-shape gives its input shapes (write the batch and length there)")
    symbolic = {("batch" if i == 0 else "seq_len") for _, dims, _ in graph_inputs for i, d in enumerate(dims) if not (isinstance(d, int) and d > 0)}
    fixed = ", ".join(f"{name} {tuple(dims)}" for name, dims, _ in graph_inputs)
    refuse_flags(str(path), [n for n in _given(options, ("batch", "seq_len")) if n not in symbolic], f"its graph fixes those dimensions ({fixed})")


def _spec_from_graph(name: str, dims: list, dtype: torch.dtype, options: BuildOptions) -> InputSpec:
    """Symbolic dims: the first is the batch (--batch or 1), later ones the sequence (--seq-len or 128)."""
    shape = []
    for i, d in enumerate(dims):
        if isinstance(d, int) and d > 0:
            shape.append(d)
        else:
            shape.append((options.batch or 1) if i == 0 else (options.seq_len or 128))
    return InputSpec(tuple(shape), dtype)


def smoke_test(workload: Workload) -> list[torch.Tensor]:
    """Run the model once on its example inputs; a failure is the user's shape/type problem."""
    try:
        with torch.no_grad():
            return tensor_leaves(workload.model(*fresh_copy(workload.example_inputs)))
    except Exception as exc:  # noqa: BLE001
        if out_of_memory(exc):
            raise out_of_memory_error(workload, exc) from exc
        shapes = ", ".join(str(tuple(t.shape)) for t in workload.example_inputs if isinstance(t, torch.Tensor))
        raise WorkloadError(f"{workload.name} failed on its example inputs {shapes}: {first_line(exc)} (check the input shapes/dtypes)") from exc

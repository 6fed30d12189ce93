"""Turn what the user names into a Workload.

- `zoo:NAME`                      a built-in workload
- `path/to/file.py:factory`       factory() returns (model, example_inputs) or a Workload
- `model.pt2`                     a torch.export archive (example inputs saved inside)
- `model.pt` / `.ts` / `.torchscript`  TorchScript; input shapes from --input-shape
- `model.onnx`                    run through ONNX Runtime; shapes from the graph or --input-shape

Every failure a user can cause ends as a one-line WorkloadError naming the problem and the fix.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from agnitra.errors import NotApplicable, UserError, WorkloadError, first_line
from agnitra.workloads.base import TaskKind, Workload, tensor_leaves
from agnitra.workloads.registry import BuildOptions, build_workload

TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript", ".jit")
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


def load_workload(spec: str, options: BuildOptions, input_shapes: list[str] | None = None, task: str | None = None) -> Workload:
    """Resolve a model spec into a Workload on options.device."""
    shapes = [parse_input_shape(s) for s in input_shapes or []]
    if spec.startswith("zoo:"):
        return build_workload(spec[4:], options)
    path_text, sep, factory = spec.rpartition(":")
    if sep and path_text.endswith(".py"):
        workload = _from_factory(Path(path_text), factory, options)
    elif spec.endswith(".py"):
        raise UserError(f"'{spec}' names a Python file but no factory; write {spec}:FUNCTION (a function returning (model, example_inputs))")
    else:
        workload = _from_file(Path(spec), options, shapes)
    if task:
        workload.task = TaskKind(task)
        workload.comparison = ""
        workload.__post_init__()
    return workload


def _require_file(path: Path) -> None:
    if not path.exists():
        raise WorkloadError(f"model file not found: {path} (check the path, or use zoo:NAME for a built-in workload)")
    if not path.is_file():
        raise WorkloadError(f"{path} is not a file")


def _from_factory(path: Path, factory: str, options: BuildOptions) -> Workload:
    _require_file(path)
    if not factory.isidentifier():
        raise UserError(f"bad factory name '{factory}' in '{path}:{factory}'; write path/to/file.py:function_name")
    module_name = f"agnitra_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - user code raises anything
        raise WorkloadError(f"importing {path} failed: {first_line(exc)} (run it with python to see the error)") from exc
    fn = getattr(module, factory, None)
    if not callable(fn):
        available = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module_name)
        raise WorkloadError(f"{path} has no function '{factory}'; functions defined there: {', '.join(available) or 'none'}")
    try:
        made = fn()
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"{path}:{factory}() raised {first_line(exc)}") from exc
    return _as_workload(made, f"{path}:{factory}", options.device)


def _as_workload(made, source: str, device: torch.device) -> Workload:
    if isinstance(made, Workload):
        workload = made
    elif isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        model, inputs = made
        inputs = inputs if isinstance(inputs, tuple) else (tuple(inputs) if isinstance(inputs, list) else (inputs,))
        workload = Workload(name=Path(source.split(":")[0]).stem, model=model, example_inputs=inputs, task=TaskKind.GENERIC)
    else:
        raise WorkloadError(f"{source} returned {type(made).__name__}; it must return (model, example_inputs) or an agnitra.Workload")
    workload.source = source
    workload.model = _inference_mode(workload.model.to(device))
    workload.example_inputs = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in workload.example_inputs)
    first = next((t for t in workload.example_inputs if isinstance(t, torch.Tensor)), None)
    if first is not None and first.dim() > 0:
        workload.batch = first.shape[0]
    return workload


def _inference_mode(model: torch.nn.Module) -> torch.nn.Module:
    try:
        return model.eval()
    except NotImplementedError:  # torch.export modules are fixed in inference form already
        return model


def _from_file(path: Path, options: BuildOptions, shapes: list[InputSpec]) -> Workload:
    _require_file(path)
    suffix = path.suffix.lower()
    if suffix == ".pt2":
        return _from_pt2(path, options.device)
    if suffix == ".onnx":
        return _from_onnx(path, options, shapes)
    if suffix in TORCHSCRIPT_SUFFIXES:
        return _from_torchscript(path, options.device, shapes)
    raise WorkloadError(f"cannot tell what {path} is; use zoo:NAME, file.py:factory, *.pt2, *.onnx or TorchScript ({', '.join(TORCHSCRIPT_SUFFIXES)})")


def _from_pt2(path: Path, device: torch.device) -> Workload:
    try:
        program = torch.export.load(str(path))
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"{path} is not a readable torch.export archive ({first_line(exc)}); re-save it with torch.export.save") from exc
    example = getattr(program, "example_inputs", None)
    if not example or not example[0]:
        raise WorkloadError(f"{path} holds no example inputs; export with torch.export.export(model, example_args) and save again")
    args, kwargs = example
    if kwargs:
        raise WorkloadError(f"{path} was exported with keyword inputs ({', '.join(kwargs)}); Agnitra needs positional example inputs")
    model = program.module()
    return _as_workload((model, tuple(args)), str(path), device)


def _from_torchscript(path: Path, device: torch.device, shapes: list[InputSpec]) -> Workload:
    if not zipfile.is_zipfile(path):
        raise WorkloadError(f"{path} is not a TorchScript archive (a plain state_dict or pickle is not a model; give file.py:factory instead)")
    try:
        model = torch.jit.load(str(path), map_location=device)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"{path} could not be loaded as TorchScript ({first_line(exc)}); save it with torch.jit.save") from exc
    if not shapes:
        raise WorkloadError("TorchScript does not record input shapes; pass them, e.g. --input-shape 1x3x224x224 (one per input)")
    workload = _as_workload((model, random_inputs(shapes, device, 0)), str(path), device)
    workload.make_inputs = lambda seed: random_inputs(shapes, device, seed)
    return workload


def _from_onnx(path: Path, options: BuildOptions, shapes: list[InputSpec]) -> Workload:
    import onnx

    from agnitra.ort.session import OrtModule, input_specs, open_session

    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError, DecodeError, ...
        raise WorkloadError(f"{path} is not a valid ONNX model ({first_line(exc)}); re-export it") from exc
    try:
        session = open_session(path, options.device)
    except NotApplicable as exc:
        raise WorkloadError(f"cannot run {path} on {options.device.type}: {exc}") from exc
    graph_inputs = input_specs(session)
    specs = shapes or [_spec_from_graph(name, dims, dtype, options) for name, dims, dtype in graph_inputs]
    if len(specs) != len(graph_inputs):
        raise WorkloadError(f"{path} takes {len(graph_inputs)} inputs ({', '.join(n for n, _, _ in graph_inputs)}) but {len(specs)} --input-shape were given")
    module = OrtModule(session, options.device, path=path)
    workload = _as_workload((module, random_inputs(specs, options.device, 0)), str(path), options.device)
    workload.make_inputs = lambda seed: random_inputs(specs, options.device, seed)
    return workload


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
            return tensor_leaves(workload.model(*workload.example_inputs))
    except torch.cuda.OutOfMemoryError as exc:
        raise WorkloadError(f"{workload.name} ran out of GPU memory on its example inputs; lower --batch or --seq-len") from exc
    except Exception as exc:  # noqa: BLE001
        shapes = ", ".join(str(tuple(t.shape)) for t in workload.example_inputs if isinstance(t, torch.Tensor))
        raise WorkloadError(f"{workload.name} failed on its example inputs {shapes}: {first_line(exc)} (check the input shapes/dtypes)") from exc

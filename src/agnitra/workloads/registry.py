"""The zoo: built-in workloads by name. A new workload is one new file in zoo/ and one decorator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from agnitra.errors import UserError
from agnitra.workloads.base import TaskKind, Workload

SIZES = ("full", "tiny", "small", "large")  # small, large: tinylm-py's two trained sizes (full means small there)


@dataclass(frozen=True)
class BuildOptions:
    """What a caller may choose when building a zoo workload; None means the workload's default."""

    device: torch.device = torch.device("cpu")
    dtype: torch.dtype | None = None
    batch: int | None = None
    seq_len: int | None = None  # encoders: sequence length; decoders: prompt length
    tokens: int | None = None  # decoders: new tokens per generation
    size: str = "full"  # "tiny" shrinks every dimension for tests
    seed: int = 0

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise UserError(f"unknown size '{self.size}'; use one of: {', '.join(SIZES)}")
        for name in ("batch", "seq_len", "tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {value}")

    def pick_dtype(self, cuda_default: torch.dtype, cpu_default: torch.dtype = torch.float32) -> torch.dtype:
        if self.dtype is not None:
            return self.dtype
        return cuda_default if self.device.type == "cuda" else cpu_default


@dataclass(frozen=True)
class ZooEntry:
    name: str
    task: TaskKind
    description: str
    build: Callable[[BuildOptions], Workload]
    count_params: Callable[[str], int]  # size -> parameters, without materialising weights


ZOO: dict[str, ZooEntry] = {}


def register_workload(name: str, task: TaskKind, description: str, count_params: Callable[[str], int]):
    """Decorator: register `build(options) -> Workload` under `name`."""

    def wrap(build: Callable[[BuildOptions], Workload]):
        if name in ZOO:
            raise ValueError(f"workload '{name}' registered twice")
        ZOO[name] = ZooEntry(name, TaskKind(task), description, build, count_params)
        return build

    return wrap


def zoo_entries() -> list[ZooEntry]:
    import agnitra.workloads.zoo  # noqa: F401  (registers the built-in workloads)

    return list(ZOO.values())


def get_entry(name: str) -> ZooEntry:
    entries = {e.name: e for e in zoo_entries()}
    if name not in entries:
        raise UserError(f"no zoo workload named '{name}'; available: {', '.join(sorted(entries))} (see `agnitra zoo list`)")
    return entries[name]


def build_workload(name: str, options: BuildOptions | None = None) -> Workload:
    options = options or BuildOptions()
    workload = get_entry(name).build(options)
    workload.source = f"zoo:{name}"
    return workload


def count_on_meta(build_model: Callable[[], torch.nn.Module]) -> int:
    """Parameters of a model constructed on the meta device: no memory, no init time."""
    with torch.device("meta"):
        model = build_model()
    return sum(p.numel() for p in model.parameters())

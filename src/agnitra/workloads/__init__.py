from agnitra.workloads.base import DecoderSpec, TaskKind, Workload, tensor_leaves
from agnitra.workloads.registry import BuildOptions, build_workload, register_workload, zoo_entries

__all__ = [
    "BuildOptions",
    "DecoderSpec",
    "TaskKind",
    "Workload",
    "build_workload",
    "register_workload",
    "tensor_leaves",
    "zoo_entries",
]

"""Agnitra: measure, optimize and verify PyTorch models for inference."""

from agnitra._version import __version__
from agnitra.api import benchmark, describe_device, inspect, prepare_workload, profile
from agnitra.ir import GraphIR, capture
from agnitra.report.schema import BenchReport, ProfileReport, VariantResult
from agnitra.workloads.base import DecoderSpec, TaskKind, Workload

__all__ = [
    "BenchReport",
    "DecoderSpec",
    "GraphIR",
    "ProfileReport",
    "TaskKind",
    "VariantResult",
    "Workload",
    "__version__",
    "benchmark",
    "capture",
    "describe_device",
    "inspect",
    "prepare_workload",
    "profile",
]

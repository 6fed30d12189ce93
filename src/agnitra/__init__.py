"""Agnitra: measure, optimize and verify PyTorch models for inference."""

from agnitra._version import __version__
from agnitra.api import benchmark, describe_device, prepare_workload, profile
from agnitra.report.schema import BenchReport, ProfileReport, VariantResult
from agnitra.workloads.base import DecoderSpec, TaskKind, Workload

__all__ = [
    "BenchReport",
    "DecoderSpec",
    "ProfileReport",
    "TaskKind",
    "VariantResult",
    "Workload",
    "__version__",
    "benchmark",
    "describe_device",
    "prepare_workload",
    "profile",
]

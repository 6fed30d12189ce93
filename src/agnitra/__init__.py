"""Agnitra: measure, optimize and verify PyTorch models for inference."""

from agnitra._version import __version__
from agnitra.api import benchmark, describe_device, inspect, layout, optimize, prepare_workload, profile
from agnitra.optimized import OptimizedModel, apply, load
from agnitra.search.settings import SearchSettings
from agnitra.transforms.recipe import Recipe
from agnitra.verify import Tolerances
from agnitra.ir import GraphIR, capture
from agnitra.results import BenchReport, ProfileReport, VariantResult
from agnitra.workloads.base import DecoderSpec, TaskKind, Workload

__all__ = [
    "BenchReport",
    "DecoderSpec",
    "GraphIR",
    "OptimizedModel",
    "Recipe",
    "SearchSettings",
    "ProfileReport",
    "TaskKind",
    "Tolerances",
    "VariantResult",
    "Workload",
    "__version__",
    "apply",
    "benchmark",
    "capture",
    "describe_device",
    "inspect",
    "layout",
    "load",
    "optimize",
    "prepare_workload",
    "profile",
]

"""Test defaults: CPU only, a private cache dir, small thread counts (CI has 2 cores).

Triton kernels run through Triton's interpreter on the CPU. The mode is read when Triton is first
imported, so it is set here, before any test module (or torch.compile) imports it; on the GPU
machine `AGNITRA_GPU_TESTS=1` leaves it unset so kernels compile for the device.
"""

from __future__ import annotations

import os

if os.environ.get("AGNITRA_GPU_TESTS") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, tmp_path, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "agnitra-cache"  # shared by the session: ceilings measured once
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(cache))
    # each test its own measurement store: no test warm-starts from another's runs
    monkeypatch.setenv("AGNITRA_DB_URL", f"sqlite:///{tmp_path / 'agnitra-store.db'}")
    # and no shipped seed: a test's store is what its cost model learns from (test_costmodel_seed turns it on)
    monkeypatch.setenv("AGNITRA_COSTMODEL_SEED", "0")
    monkeypatch.delenv("AGNITRA_DEVICE", raising=False)
    yield


@pytest.fixture(autouse=True)
def _kernel_tests_on_the_gpu(request):
    """AGNITRA_GPU_TESTS=1 on a GPU machine: the interpreter tests' tensors are made on CUDA."""
    from kernel_device import ON_GPU

    if ON_GPU and request.node.get_closest_marker("interpreter"):
        torch.set_default_device("cuda")
        yield
        torch.set_default_device(None)
    else:
        yield


@pytest.fixture
def cpu() -> torch.device:
    return torch.device("cpu")


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

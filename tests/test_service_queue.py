"""The job queue on SQLite and on a real PostgreSQL: workers claiming at once take different jobs,
a re-submitted idempotency key makes one job, a lapsed lease is queued again and its old owner can
no longer write an outcome, a running job asked to cancel ends cancelled."""

from __future__ import annotations

import datetime as dt
import threading
import time

from sqlalchemy import update

from agnitra.service import queue
from agnitra.store import open_store
from agnitra.store.service_schema import JobRow, ModelRow, ProjectRow


def _store_with_model(db_url):
    store = open_store(db_url)
    with store.session() as session:
        project = ProjectRow(name="team", created_at=queue.now())
        session.add(project)
        session.flush()
        model = ModelRow(project_id=project.id, name="m", kind="zoo", spec="zoo:bert-base", options={}, sha256="", summary={}, created_at=queue.now())
        session.add(model)
        session.flush()
        return store, project.id, model.id


def _in_threads(count: int, work) -> list:
    results, threads = [], []
    for i in range(count):
        threads.append(threading.Thread(target=lambda i=i: results.append(work(i))))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_workers_claiming_at_once_take_different_jobs(db_url):
    store, project, model = _store_with_model(db_url)
    with store.session() as session:
        for _ in range(12):
            queue.submit(session, project, model, "schedule", {}, None, None)

    def claim_all(i: int) -> list[int]:
        taken = []
        while True:
            with store.session() as session:
                job = queue.claim(session, f"worker-{i}")
                if job is None:
                    return taken
                taken.append(job.id)

    claimed = [job for taken in _in_threads(4, claim_all) for job in taken]
    assert sorted(claimed) == list(range(1, 13))  # every job once, none twice
    store.close()


def test_one_idempotency_key_is_one_job(db_url):
    store, project, model = _store_with_model(db_url)

    def submit(i: int) -> tuple[int, bool]:
        with store.session() as session:
            job, new = queue.submit(session, project, model, "schedule", {"budget": "1m"}, "nightly-7", None)
            return job.id, new

    results = _in_threads(6, submit)
    assert len({job for job, _ in results}) == 1 and sum(new for _, new in results) == 1
    store.close()


def test_a_lapsed_lease_is_queued_again_and_its_old_owner_cannot_finish(db_url):
    store, project, model = _store_with_model(db_url)
    with store.session() as session:
        job, _ = queue.submit(session, project, model, "schedule", {}, None, None)
        assert queue.claim(session, "dead").id == job.id
    with store.session() as session:  # the worker died: its lease runs out
        session.execute(update(JobRow).where(JobRow.id == job.id).values(lease_until=queue.now() - dt.timedelta(seconds=1)))
    with store.session() as session:
        assert queue.requeue_lapsed(session) == [job.id]
        assert queue.claim(session, "alive").attempts == 2
    with store.session() as session:
        assert not queue.finish(session, job.id, "dead", "done", result={"verdict": "stale"})
        assert queue.renew(session, job.id, "alive") and not queue.renew(session, job.id, "dead")
        assert queue.finish(session, job.id, "alive", "done", result={"verdict": "fresh"})
        assert not queue.finish(session, job.id, "alive", "done", result={"verdict": "twice"})
    with store.session() as session:
        done = session.get(JobRow, job.id)
        assert done.status == "done" and done.result == {"verdict": "fresh"}
    store.close()


def test_a_running_job_asked_to_cancel_ends_cancelled_whatever_its_run_writes(db_url):
    """A run being stopped can still write its failure (a Ray task cancelled mid-run): the cancellation stands."""
    store, project, model = _store_with_model(db_url)
    with store.session() as session:
        job, _ = queue.submit(session, project, model, "schedule", {}, None, None)
        queue.claim(session, "worker")
        queue.cancel(session, session.get(JobRow, job.id))
    with store.session() as session:
        assert not queue.finish(session, job.id, "worker", "failed", error="EOFError: unexpected EOF")
        assert not queue.finish(session, job.id, "worker", "cancelled")  # it is already
    with store.session() as session:
        assert session.get(JobRow, job.id).status == "cancelled"
    store.close()


def test_a_refused_uploads_file_is_deleted_unless_a_stored_row_names_it(db_url, tmp_path):
    """Uploads are kept under their content hash, so a refused upload of a file a stored model or
    dataset already names keeps it; any other refused upload's file goes. On PostgreSQL the refusal
    is the database's own (a NUL in a name), after the file was written."""
    import pytest
    from sqlalchemy.exc import DataError

    from agnitra.service.routes.models import discard_upload
    from agnitra.store.service_schema import DatasetRow

    store, project_id, _ = _store_with_model(db_url)
    named, orphan, refused = (tmp_path / f"{name}.pt" for name in ("named", "orphan", "refused"))
    for path in (named, orphan, refused):
        path.write_bytes(b"rows")
    with store.session() as session:
        session.add(DatasetRow(project_id=project_id, name="kept", filename="named.pt", path=str(named), size_bytes=4, sha256="", summary={}, created_at=queue.now()))
    with store.sessions() as session:  # as a request's session is made (`access.session`)
        discard_upload(session, named)
        discard_upload(session, orphan)
    assert named.exists() and not orphan.exists()
    if db_url.startswith("postgresql"):
        with store.sessions() as session, pytest.raises(DataError):
            session.add(DatasetRow(project_id=project_id, name="a\x00b", filename="refused.pt", path=str(refused), size_bytes=4, sha256="", summary={}, created_at=queue.now()))
            try:
                session.flush()
            finally:
                discard_upload(session, refused)
        assert not refused.exists()
    store.close()


def test_a_lease_renewed_after_the_lapse_was_read_is_not_taken_away(db_url, monkeypatch):
    """The keeper reads a lapsed lease; before it writes, the job's worker claims it again (or
    renews it): the job stays running under that lease, not queued again under its feet."""
    store, project_id, model_id = _store_with_model(db_url)
    with store.session() as session:
        job, _ = queue.submit(session, project_id, model_id, "schedule", {}, None, None)
        queue.claim(session, "worker-a")
        session.execute(update(JobRow).where(JobRow.id == job.id).values(lease_until=queue.now() - dt.timedelta(seconds=5)))
    seen = queue._aware

    def renewed_meanwhile(moment):  # called between requeue_lapsed's read and its write
        with store.session() as other:
            assert queue.renew(other, job.id, "worker-a")
        return seen(moment)

    monkeypatch.setattr(queue, "_aware", renewed_meanwhile)
    with store.session() as session:
        assert queue.requeue_lapsed(session) == []
    monkeypatch.setattr(queue, "_aware", seen)
    with store.session() as session:
        row = session.get(JobRow, job.id)
        assert row.status == "running" and row.lease_owner == "worker-a" and queue._aware(row.lease_until) > queue.now()
    store.close()


class _FinishingRun:
    """A job's run standing in for the child process: it lasts `seconds`, then writes its outcome
    through the queue as the child does."""

    lost = False

    def __init__(self, store, job_id: int, owner: str, seconds: float) -> None:
        self.store, self.job_id, self.owner, self.ends = store, job_id, owner, time.monotonic() + seconds

    def running(self) -> bool:
        if time.monotonic() < self.ends:
            return True
        with self.store.session() as session:
            queue.finish(session, self.job_id, self.owner, "done", result={"verdict": "written by the test"})
        return False

    def wait(self, seconds: float) -> None:
        time.sleep(min(seconds, max(0.0, self.ends - time.monotonic())))

    def kill(self) -> None:
        self.ends = 0.0

    def ended(self) -> str:
        return "ended"


def test_a_worker_outlives_a_store_busy_past_its_wait(tmp_path, monkeypatch, capfd):
    """Another process holds SQLite's write lock for longer than a writer waits for it (a slow
    request once did, and every worker died on its next lease renewal): the worker misses those
    renewals, says so, renews once the lock is free, and its job ends done."""
    import sqlite3

    from agnitra.service import worker
    from agnitra.store import db

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store, project_id, model_id = _store_with_model(url)
    with store.session() as session:
        job, _ = queue.submit(session, project_id, model_id, "schedule", {"budget": "30s"}, None, None)
    store.close()
    monkeypatch.setattr(db, "SQLITE_BUSY_S", 0.5)
    monkeypatch.setattr(worker, "RENEW_S", 0.2)
    holder = sqlite3.connect(tmp_path / "store.db", timeout=10, check_same_thread=False)

    class Executor:
        def launch(self, launch):
            holder.execute("BEGIN IMMEDIATE")  # the write lock, held past every wait: SQLite's default is 5 s
            threading.Timer(6.0, holder.rollback).start()
            return _FinishingRun(open_store(url), launch.job_id, launch.owner, seconds=7.0)

    monkeypatch.setattr(worker, "make_executor", lambda name: Executor())
    assert worker.run_worker(worker.WorkerConfig(url, str(tmp_path / "data")), stop_after=1) == 1
    assert "the store did not answer (OperationalError: (sqlite3.OperationalError) database is locked" in capfd.readouterr().err
    check = open_store(url)
    with check.session() as session:
        row = session.get(JobRow, job.id)
        assert (row.status, row.attempts) == ("done", 1), (row.status, row.error)
    check.close()
    holder.close()

"""The job queue, in the store's database: submit (idempotent by key), claim with a lease, renew it,
finish once, requeue what a dead worker held.

A worker owns a running job while its lease lasts; it renews the lease while the job runs. A worker
killed outright (kill -9) renews nothing: once the lease has lapsed the job is queued again and the
next worker runs it from the start. A result is written only by the lease's owner, in the same
transaction that records its measurements, so nothing is recorded twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, make_transient_to_detached

from agnitra.config import job_lease_seconds
from agnitra.store.service_schema import JobEventRow, JobRow

# a running job whose worker has not renewed its lease for this long is queued again
LEASE_S = job_lease_seconds()
# a worker's and a job's store, opened for many writers (SQLite: WAL, and a writer waits its turn
# for SQLITE_BUSY_S): the server, the workers and their jobs write one file
CONNECTIONS = 2
MAX_ATTEMPTS = 3  # a job that took down this many workers is failed, not queued again
FINISHED = ("done", "failed", "cancelled")


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    """SQLite returns naive datetimes for timezone columns: they were written in UTC."""
    return moment.replace(tzinfo=dt.timezone.utc) if moment is not None and moment.tzinfo is None else moment


def submit(session: Session, project_id: int, model_id: int, kind: str, settings: dict[str, Any], idempotency_key: str | None,
           created_by: int | None) -> tuple[JobRow, bool]:
    """The job (new, or the one this project already submitted under `idempotency_key`), and whether it is new."""
    if idempotency_key:
        found = _by_key(session, project_id, idempotency_key)
        if found is not None:
            return found, False
    values = dict(project_id=project_id, model_id=model_id, kind=kind, settings=settings, idempotency_key=idempotency_key or None, created_by=created_by,
                  status="queued", attempts=0, lease_owner="", lease_until=None, cancel_requested=False, progress=0.0, result={}, error="",
                  created_at=now(), started_at=None, finished_at=None)
    job = _insert(session, values)
    if job is None:  # the same key submitted at the same moment by another request
        return _by_key(session, project_id, idempotency_key), False
    event(session, job.id, "queued")
    return job, True


def _by_key(session: Session, project_id: int, idempotency_key: str) -> JobRow | None:
    return session.scalar(select(JobRow).where(JobRow.project_id == project_id, JobRow.idempotency_key == idempotency_key))


# built once: building an INSERT with its values took more CPU than running it
_NEW_JOB = {name: dialect.insert(JobRow.__table__).on_conflict_do_nothing(index_elements=["project_id", "idempotency_key"]).returning(JobRow.__table__.c.id)
            for name, dialect in (("sqlite", sqlite), ("postgresql", postgresql))}
_NEW_EVENT = insert(JobEventRow.__table__)


def _insert(session: Session, values: dict[str, Any]) -> JobRow | None:
    """The new job, None where its idempotency key was taken meanwhile. SQLite and PostgreSQL: one
    INSERT ... ON CONFLICT DO NOTHING RETURNING id, the row put in the session as written (no
    savepoint, no flush: a third of a submission's CPU); other databases: a flush in a savepoint."""
    statement = _NEW_JOB.get(session.get_bind().dialect.name)
    if statement is not None:
        job_id = session.execute(statement, values).scalar()
        if job_id is None:
            return None
        job = JobRow(id=job_id, **values)
        make_transient_to_detached(job)  # every column set: nothing left to load
        session.add(job)
        return job
    job = JobRow(**values)
    try:
        with session.begin_nested():
            session.add(job)
            session.flush()
    except IntegrityError:
        return None
    return job


def event(session: Session, job_id: int, message: str, fraction: float | None = None) -> None:
    """A line of the job's events, written now (the job's row is written already)."""
    session.execute(_NEW_EVENT, {"job_id": job_id, "message": message[:2000], "fraction": fraction, "at": now()})


def claim(session: Session, owner: str) -> JobRow | None:
    """The oldest queued job, now running under `owner`'s lease; None when the queue is empty. The
    conditional update makes two workers claiming at once take different jobs."""
    for job_id in session.scalars(select(JobRow.id).where(JobRow.status == "queued").order_by(JobRow.id).limit(8)):
        taken = session.execute(
            update(JobRow).where(JobRow.id == job_id, JobRow.status == "queued")
            .values(status="running", lease_owner=owner, lease_until=now() + dt.timedelta(seconds=LEASE_S),
                    attempts=JobRow.attempts + 1, started_at=now())
        ).rowcount
        if taken:
            job = session.get(JobRow, job_id)
            session.refresh(job)
            event(session, job_id, f"running (attempt {job.attempts}, worker {owner})")
            return job
    return None


def renew(session: Session, job_id: int, owner: str) -> bool:
    """Extend `owner`'s lease; False when the job is no longer its own (taken over, cancelled, finished)."""
    return bool(session.execute(
        update(JobRow).where(JobRow.id == job_id, JobRow.lease_owner == owner, JobRow.status == "running")
        .values(lease_until=now() + dt.timedelta(seconds=LEASE_S))
    ).rowcount)


def progress(session: Session, job_id: int, owner: str, message: str, fraction: float) -> None:
    if session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.lease_owner == owner, JobRow.status == "running")
                       .values(progress=round(fraction, 4))).rowcount:
        event(session, job_id, message, fraction)


def finish(session: Session, job_id: int, owner: str, status: str, result: dict[str, Any] | None = None, error: str = "") -> bool:
    """Record the outcome if `owner` still holds the job; False (nothing written) otherwise. A job
    whose cancellation was asked for ends cancelled, whatever outcome its run comes to while it is
    being stopped (a Ray task cancelled mid-run can still write its failure): False then, unless
    `status` is cancelled."""
    held = (JobRow.id == job_id, JobRow.lease_owner == owner, JobRow.status == "running")
    if status == "cancelled":
        return _end(session, job_id, held, status)
    if _end(session, job_id, (*held, JobRow.cancel_requested.is_(False)), status, result, error):
        return True
    _end(session, job_id, (*held, JobRow.cancel_requested.is_(True)), "cancelled")
    return False


def _end(session: Session, job_id: int, where: tuple, status: str, result: dict[str, Any] | None = None, error: str = "") -> bool:
    done = session.execute(
        update(JobRow).where(*where)
        .values(status=status, result=result or {}, error=error[:4000], finished_at=now(), lease_until=None,
                progress=1.0 if status == "done" else JobRow.progress)
    ).rowcount
    if done:
        event(session, job_id, status + (f": {error}" if error else ""))
    return bool(done)


def requeue_lapsed(session: Session) -> list[int]:
    """Running jobs whose lease lapsed (their worker died): queued again, or failed after MAX_ATTEMPTS."""
    lapsed = session.scalars(select(JobRow).where(JobRow.status == "running", JobRow.lease_until < now())).all()
    moved = []
    for job in lapsed:
        if _aware(job.lease_until) >= now():
            continue
        gone = job.lease_owner
        if job.attempts >= MAX_ATTEMPTS:
            values = dict(status="failed", error=f"its worker died {job.attempts} times (last: {gone}); not queued again", finished_at=now())
        else:
            values = dict(status="queued", lease_owner="")
        # still lapsed when written: SQLite reads outside a transaction, so a renewal or a new claim (by the same worker too) can land after the read
        still_lapsed = (JobRow.id == job.id, JobRow.status == "running", JobRow.lease_owner == gone, JobRow.lease_until < now())
        # not evaluated against the session's objects in Python: SQLite hands back naive datetimes, now() is aware
        if session.execute(update(JobRow).where(*still_lapsed).values(lease_until=None, **values).execution_options(synchronize_session=False)).rowcount:
            session.expire(job)
            event(session, job.id, f"its worker {gone} stopped renewing its lease: " + ("failed" if values["status"] == "failed" else "queued again"))
            moved.append(job.id)
    return moved


def cancel(session: Session, job: JobRow) -> None:
    """A queued job is cancelled at once; a running one (also one that a worker claimed between this
    request's read and its write) when its worker sees the request or its run ends, whichever is first."""
    if job.status == "queued":
        if session.execute(update(JobRow).where(JobRow.id == job.id, JobRow.status == "queued").values(status="cancelled", finished_at=now())).rowcount:
            event(session, job.id, "cancelled")
        session.refresh(job)
    if job.status == "running":
        session.execute(update(JobRow).where(JobRow.id == job.id).values(cancel_requested=True))
        event(session, job.id, "cancel requested")
    session.refresh(job)

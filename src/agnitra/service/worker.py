"""`agnitra worker`: takes jobs from the queue and runs each in a child process of its own (forked
from the worker on Linux), or as a Ray task on a cluster (`--executor ray`, service/executor.py).

The child runs `api.optimize` on the job's model with the job's settings, exactly as the CLI does,
writing its progress to the job; the outcome is written by the child in one transaction with the
run's measurements (`finish` only while the lease is its own). The worker renews the lease while
the child runs, kills it at the job's hard limit (its budget and a grace) or on cancellation, and
marks a child that died without an outcome failed. The child dies with its worker (PDEATHSIG); a
Ray task is killed by Ray when its owner, this worker, dies. A Ray task lost with its node leaves
the job to its lease, which lapses: the job is queued again.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import OperationalError

from agnitra.bench.isolated import die_with_parent
from agnitra.errors import UserError, first_line
from agnitra.service import queue
from agnitra.service.executor import JobLaunch, make_executor
from agnitra.store import open_store, record_report
from agnitra.store.service_schema import DatasetRow, JobRow, ModelRow

POLL_S = 0.1  # an idle worker looks at the queue this often (two SELECTs: a job waits at most this long for a free worker)
RENEW_S = queue.LEASE_S / 6  # lease renewal while a job runs
GRACE_S = 60.0  # past the job's budget, before its child is killed
PROGRESS_EVERY_S = 1.0


@dataclass
class WorkerConfig:
    db_url: str
    data_dir: Path  # job run folders: data_dir/jobs/<id>
    owner: str = ""
    executor: str = "local"  # where jobs run: local (a child process) or ray (a Ray task)

    def __post_init__(self) -> None:
        self.owner = self.owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def run_worker(config: WorkerConfig, stop_after: int | None = None, idle_exit_s: float | None = None) -> int:
    """Take and run jobs until stopped (`stop_after` jobs, or `idle_exit_s` without one); returns how many ran."""
    executor = make_executor(config.executor)  # a user error before any job is claimed (Ray missing or unreachable)
    store = open_store(config.db_url, connections=queue.CONNECTIONS)
    ran, idle_since = 0, time.monotonic()
    try:
        while stop_after is None or ran < stop_after:
            try:
                with store.session() as session:
                    queue.requeue_lapsed(session)
                    job = queue.claim(session, config.owner)
                    job_id = job.id if job else None
            except OperationalError as exc:  # the store busy past its wait (or gone a moment): the next poll tries again
                _said_busy(exc)
                job_id = None
            if job_id is None:
                if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                    break
                time.sleep(POLL_S)
                continue
            try:
                _supervise(store, config, executor, job_id)
            except Exception as exc:  # noqa: BLE001 - the job fails, the worker goes on
                try:
                    with store.session() as session:
                        queue.finish(session, job_id, config.owner, "failed", error=f"the worker could not run it: {first_line(exc)}")
                except OperationalError as busy:  # the job is left to its lease, which lapses: it is queued again
                    _said_busy(busy)
            ran, idle_since = ran + 1, time.monotonic()
    finally:
        store.close()
    return ran


def _supervise(store, config: WorkerConfig, executor, job_id: int) -> None:
    with store.session() as session:
        job = session.get(JobRow, job_id)
        budget_s = _budget_s(job.settings)
        device = _device_of(job.settings, session.get(ModelRow, job.model_id).options)
    store.engine.dispose()  # no connection of this process's open while the job starts: a forked child shares none
    # the folder absolute: a Ray task does not run in this process's working directory
    run = executor.launch(JobLaunch(config.db_url, str(Path(config.data_dir).resolve()), config.owner, job_id, device))
    deadline, why = time.monotonic() + budget_s + GRACE_S, ""
    while run.running():
        run.wait(RENEW_S)
        try:
            with store.session() as session:
                held = queue.renew(session, job_id, config.owner)
                cancelled = session.get(JobRow, job_id).cancel_requested
        except OperationalError as exc:  # not renewed this time; the lease outlasts a few such
            _said_busy(exc)
            continue
        if cancelled or not held or time.monotonic() > deadline:
            why = "cancelled" if cancelled else ("its lease was lost" if not held else f"ran past its limit ({budget_s:.0f} s budget + {GRACE_S:.0f} s)")
            run.kill()
            break
    with store.session() as session:
        if why == "cancelled":
            queue.finish(session, job_id, config.owner, "cancelled")
        elif session.get(JobRow, job_id).status == "running":
            ended = why or run.ended()
            if run.lost:  # not the job's doing: its lease lapses and it is queued again (requeue_lapsed)
                queue.event(session, job_id, f"{ended}; queued again once its lease lapses")
            else:
                queue.finish(session, job_id, config.owner, "failed", error=ended)


def _said_busy(exc: OperationalError) -> None:
    print(f"agnitra worker {os.getpid()}: the store did not answer ({first_line(exc)}); trying again", file=sys.stderr, flush=True)


def _device_of(settings: dict, options: dict) -> str:
    """The job's device setting (cpu, cuda or auto): the job's, the model's, else the configured one."""
    from agnitra.config import load_settings

    return str(settings.get("device") or options.get("device") or load_settings().device)


def _budget_s(settings: dict) -> float:
    from agnitra.arguments import duration

    return duration("budget", settings.get("budget") or "10m")


def _run_job(db_url: str, data_dir: str, owner: str, job_id: int, evaluation: dict | None = None) -> None:
    """The child: the job's optimize run, its progress and outcome written to the job; `evaluation`:
    where its candidates are measured (`executor`, `evaluators`), when not in its own worker."""
    die_with_parent()
    from agnitra import api

    store = open_store(db_url, connections=queue.CONNECTIONS)
    reporter, shown = _Progress(store, job_id, owner), str
    try:
        with store.session() as session:
            job = session.get(JobRow, job_id)
            model = session.get(ModelRow, job.model_id)
            spec, (arguments, shown) = model.spec, _job_arguments(session, job, model)
        optimized = api.optimize(spec, **{**arguments, **(evaluation or {})}, out=Path(data_dir) / "jobs" / str(job_id), progress=reporter, store=False)
        document = json.loads(shown(json.dumps(optimized.report.to_dict())))  # what was checked on, named as the user knows it
        with store.session() as session:
            if queue.finish(session, job_id, owner, "done", result=document):
                record_report(session, document)  # the run's measurements, with the outcome: once
    except Exception as exc:  # noqa: BLE001 - a user error or a crash: the job's outcome either way
        with store.session() as session:
            said = str(exc).strip().splitlines()[0] if isinstance(exc, UserError) and str(exc).strip() else first_line(exc, limit=1000)
            queue.finish(session, job_id, owner, "failed", error=shown(said))  # a user error as the CLI says it
    finally:
        store.close()


def _job_arguments(session, job: JobRow, model: ModelRow):
    """api.optimize's options for the job: the model's, then the job's settings (a target's folded
    in when it was submitted), which win; a dataset named as `check_inputs`. With them, what shows
    an error: the dataset's file named by its id and upload name, never the server's path."""
    settings = {k: v for k, v in job.settings.items() if k not in ("target", "dataset_id")}
    arguments = {**model.options, **settings}
    dataset_id = job.settings.get("dataset_id")
    if dataset_id is None:
        return arguments, str
    dataset = session.get(DatasetRow, dataset_id)
    if dataset is None or dataset.project_id != job.project_id:
        raise UserError(f"dataset {dataset_id} is not one of this job's project's datasets; submit the job with a dataset of its project")
    path, named = dataset.path, f"dataset {dataset.id} ({dataset.filename})"
    return {**arguments, "check_inputs": path}, lambda text: text.replace(path, named)


class _Progress:
    """api's progress callback: at most one event a second into the job."""

    def __init__(self, store, job_id: int, owner: str) -> None:
        self.store, self.job_id, self.owner, self.last = store, job_id, owner, 0.0

    def __call__(self, message: str, fraction: float) -> None:
        if time.monotonic() - self.last < PROGRESS_EVERY_S:
            return
        self.last = time.monotonic()
        try:
            with self.store.session() as session:
                queue.progress(session, self.job_id, self.owner, message, fraction)
        except OperationalError as exc:  # an event missed, not the job: the next one says where it is
            _said_busy(exc)

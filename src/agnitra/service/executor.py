"""Where a service worker runs a job: `local` (a child process of the worker, the default) or `ray`
(a Ray task on the cluster RAY_ADDRESS names, `--executor ray`).

Either way the job's lifecycle stays in the database queue: the worker claims the job with a
lease, launches it here, renews the lease while the launched run lives, and kills it on
cancellation or at its hard limit (`Launched.kill`: the child process, or `ray.cancel(force=True)`).
The run writes its progress and outcome to the job itself (`worker._run_job`), only while the
lease is its worker's.

A Ray task asks for one GPU when the job runs on CUDA (on `auto`, when the cluster has GPUs) and
for `AGNITRA_RAY_CPUS` CPUs (default 1); each task gets a fresh Ray worker process (`max_calls=1`)
that dies with its raylet, like the local child dies with its worker. A task lost with its node
(`lost`) leaves the job to its lease: it lapses and the job is queued again. The job's candidates
are measured on AGNITRA_RAY_EVALUATORS Ray evaluation slots (default 2, `bench.ray_slots`; 0: one
at a time in the job's own worker process). Ray is connected through `bench.ray_slots`, and only
for `--executor ray`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import sys
from dataclasses import dataclass

from agnitra.bench.ray_slots import check as check_ray, connect
from agnitra.errors import UserError, first_line

EXECUTORS = ("local", "ray")
CANCEL_WAIT_S = 30.0  # how long a cancelled Ray task is waited for before the worker moves on


@dataclass(frozen=True)
class JobLaunch:
    """What a job's run needs wherever it runs."""

    db_url: str
    data_dir: str
    owner: str  # the worker holding the job's lease
    job_id: int
    device: str  # the job's device setting: cpu, cuda or auto
    evaluators: int = 0  # Ray evaluation slots for the job's candidates (0: its own worker process, one at a time)
    cpus: float = 1.0  # the CPUs each of the job's Ray tasks and slots asks for


class Launched:
    """A job's run, started: `wait` for it, see whether it still `running`, `kill` it."""

    what = "process"
    lost = False  # the run was lost with its machine (not the job's doing): the job is left to its lease

    def running(self) -> bool:
        raise NotImplementedError

    def wait(self, seconds: float) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def ended(self) -> str:
        """Why a job whose run ended has no outcome: its error."""
        raise NotImplementedError


def check_executor(name: str) -> None:
    """A user error unless `name` is an executor this machine can use (for `ray`: Ray installed, and
    the cluster RAY_ADDRESS names answering)."""
    if name not in EXECUTORS:
        raise UserError(f"--executor must be one of {', '.join(EXECUTORS)}, got {name!r}")
    if name == "ray":
        check_ray()


def make_executor(name: str):
    check_executor(name)
    return RayExecutor() if name == "ray" else LocalExecutor()


class LocalExecutor:
    """Each job in a child process of the worker, on Linux forked from it: the worker has imported
    what a job runs, so a job starts at once instead of after a fresh interpreter's seconds of
    imports; the worker runs no thread of its own and holds no database connection when it forks
    (`worker._supervise` closes its pool first). Elsewhere the child is spawned. Either way it dies
    with the worker (PDEATHSIG)."""

    name = "local"

    def __init__(self) -> None:
        self.context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        if self.context.get_start_method() == "fork":
            # what warming the fork server imports, imported before any job is claimed: seconds
            # under load, which a claimed job's lease would otherwise spend unrenewed
            import torch._dynamo  # noqa: F401

    def launch(self, job: JobLaunch) -> Launched:
        from agnitra.service.worker import _run_job

        if self.context.get_start_method() == "fork":
            _warm_fork_server(job.device)
        # not a daemon: the job's optimize run starts worker processes of its own
        child = self.context.Process(target=_run_job, args=(job.db_url, job.data_dir, job.owner, job.job_id))
        child.start()
        return _Child(child)


def _warm_fork_server(device: str) -> None:
    """The CPU workers' fork server, started in this worker before a CPU job is forked: every job
    forked from here then forks its workers from this one server (`bench.fork_server`) instead of
    starting its own (~9 s of CPU a job)."""
    from agnitra.bench import fork_server
    from agnitra.device import resolve_device

    try:
        kind = resolve_device(device).type
    except UserError:
        return  # the job says why, in its own process
    fork_server.warm(kind)


class _Child(Launched):
    what = "process"

    def __init__(self, child) -> None:
        self.child = child

    def running(self) -> bool:
        return self.child.is_alive()

    def wait(self, seconds: float) -> None:
        self.child.join(seconds)

    def kill(self) -> None:
        self.child.kill()
        self.child.join()

    def ended(self) -> str:
        return f"the job's process ended without an outcome (exit code {self.child.exitcode})"


class RayExecutor:
    """Each job as a Ray task on the cluster RAY_ADDRESS names (unset: a Ray instance on this
    machine). This process, connected for its lifetime, is the task's owner: if it dies, Ray kills
    the task."""

    name = "ray"

    def __init__(self) -> None:
        from agnitra.config import ray_evaluators, ray_task_cpus

        self.ray = connect()
        self.cpus = ray_task_cpus()
        self.evaluators = ray_evaluators()  # each job's candidates measured on this many Ray slots (0: in the job's own worker)
        self.task = self.ray.remote(max_retries=0, max_calls=1)(_ray_job)

    def gpus_for(self, device: str) -> int:
        if device == "cuda":
            return 1
        if device == "auto":
            return 1 if self.ray.cluster_resources().get("GPU", 0) >= 1 else 0
        return 0

    def launch(self, job: JobLaunch) -> Launched:
        gpus = self.gpus_for(job.device)
        if gpus and self.ray.cluster_resources().get("GPU", 0) < gpus:
            return _Refused("the job runs on CUDA and the Ray cluster has no GPU")
        job = dataclasses.replace(job, evaluators=self.evaluators, cpus=self.cpus)
        ref = self.task.options(num_cpus=self.cpus, num_gpus=gpus, name=f"agnitra-job-{job.job_id}").remote(job)
        return _RayTask(self.ray, ref)


class _Refused(Launched):
    """A job this executor cannot place (no GPU on the cluster): it ends at once, without an outcome."""

    def __init__(self, why: str) -> None:
        self.why = why

    def running(self) -> bool:
        return False

    def wait(self, seconds: float) -> None:
        pass

    def kill(self) -> None:
        pass

    def ended(self) -> str:
        return f"not run: {self.why}"


class _RayTask(Launched):
    what = "Ray task"

    def __init__(self, ray, ref) -> None:
        self.ray, self.ref = ray, ref
        self.lost = False
        self._ended = ""

    def running(self) -> bool:
        done, _ = self.ray.wait([self.ref], timeout=0)
        return not done

    def wait(self, seconds: float) -> None:
        self.ray.wait([self.ref], timeout=seconds)

    def kill(self) -> None:
        self.ray.cancel(self.ref, force=True)
        self.ray.wait([self.ref], timeout=CANCEL_WAIT_S)

    def ended(self) -> str:
        if not self._ended:
            self._ended = f"the job's Ray task ended without an outcome ({self._how()})"
        return self._ended

    def _how(self) -> str:
        exceptions = self.ray.exceptions
        lost = tuple(getattr(exceptions, name) for name in ("NodeDiedError", "LocalRayletDiedError", "ObjectLostError") if hasattr(exceptions, name))
        try:
            self.ray.get(self.ref, timeout=1)
            return "it returned"
        except exceptions.TaskCancelledError:
            return "cancelled"
        except lost as exc:
            self.lost = True
            return f"lost with its node: {type(exc).__name__}"
        except exceptions.WorkerCrashedError as exc:
            return f"its Ray worker process died: {first_line(exc)}"
        except exceptions.RayTaskError as exc:
            return f"it raised {first_line(exc.cause if exc.cause is not None else exc)}"
        except Exception as exc:  # noqa: BLE001 - whatever Ray says, the job's reason
            return f"{type(exc).__name__}: {first_line(exc)}"


def _ray_job(job: JobLaunch) -> dict:
    """The Ray task: note where it runs in the job's events, then run the job as a local child would."""
    import os
    import socket

    import ray

    from agnitra.service import queue
    from agnitra.store import open_store

    context = ray.get_runtime_context()
    where = {"task_id": context.get_task_id(), "node_id": context.get_node_id(), "host": socket.gethostname(), "pid": os.getpid(),
             "gpus": [str(g) for g in ray.get_gpu_ids()]}
    store = open_store(job.db_url, connections=queue.CONNECTIONS)
    try:
        with store.session() as session:
            queue.progress(session, job.job_id, job.owner, f"in Ray task {where['task_id']} on node {where['node_id']} ({where['host']}, pid {where['pid']}"
                           + (f", GPU {','.join(where['gpus'])})" if where["gpus"] else ")"), 0.0)
    finally:
        store.close()
    from agnitra.config import give_ray_task_cpus
    from agnitra.service.worker import _run_job  # torch and the rest: after the event

    if job.evaluators:
        give_ray_task_cpus(job.cpus)  # the slots ask what the worker's settings say, not this node's
    _run_job(job.db_url, job.data_dir, job.owner, job.job_id, {"executor": "ray", "evaluators": job.evaluators} if job.evaluators else None)
    return where

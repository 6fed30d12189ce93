"""Candidates measured on a Ray cluster: K evaluation slots, each a Ray actor holding the workload
on its own device, that run the calls a `Worker` would, several at once (`--executor ray`).

A slot asks Ray for `num_gpus=1` on CUDA (Ray then shows it that one GPU only) and for
AGNITRA_RAY_CPUS CPUs, as a job's task does; the first K are spread over the cluster's nodes
(Ray's SPREAD strategy). Calls are dispatched to free slots and their results taken as they
return (`ray.wait`). A slot that dies under a call (a crash, its node lost) or runs past the
call's time limit (it is killed, `ray.kill`) fails that call, `WorkerCrashed` or `WorkerTimeout`
as a local worker's would, and is replaced on the same node if it is still there (soft node
affinity), where the replacement first removes what the dead one may have left half-written in
Inductor's cache. A slot whose call damaged its device state (`device.mark_spoiled`) answers and
is replaced. A slot that cannot load the workload is not started again: its reason is reported.

Ray is imported only here, and only for `--executor ray`; the service's job executor connects
through `connect` too.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from agnitra.bench.isolated import WorkerCrashed, WorkerError, WorkerTimeout, WorkloadSource
from agnitra.errors import UserError, first_line

RAY_MISSING = "--executor ray needs Ray, which is not installed: pip install 'agnitra[ray]'"
KILL_WAIT_S = 10.0  # a killed slot's call is waited for this long for Ray to say it died


def ray_module():
    """Ray, or the one-line user error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(RAY_MISSING) from None
    return ray


def check_reachable(address: str, seconds: float = 10.0) -> None:
    """A user error when nothing answers at the cluster's `host:port` (or `ray://host:port`): ray.init
    would retry for minutes. Addresses ray.init resolves itself (unset, `auto`, `local`) pass."""
    import socket

    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as exc:
        raise UserError(f"--executor ray cannot reach the Ray cluster at RAY_ADDRESS={address} ({exc.strerror or exc}); start it (`ray start --head`) or fix RAY_ADDRESS") from None


def check() -> None:
    """A user error unless Ray is installed and the cluster RAY_ADDRESS names answers (inside a Ray
    task or a driver already connected: nothing to check)."""
    from agnitra.config import ray_address

    ray = ray_module()
    if not ray.is_initialized():
        check_reachable(ray_address())


def connect():
    """Ray, connected to the cluster RAY_ADDRESS names (unset: a Ray instance on this machine), once
    per process; inside a Ray task it is connected already."""
    from agnitra.config import ray_address

    ray = ray_module()
    if not ray.is_initialized():
        address = ray_address()
        check_reachable(address)
        try:
            ray.init(address=address or None, logging_level="WARNING", log_to_driver=False, configure_logging=False)
        except Exception as exc:  # noqa: BLE001 - a cluster that refuses us is the user's to fix
            raise UserError(f"--executor ray could not connect to the Ray cluster (RAY_ADDRESS={address or 'unset'}): {first_line(exc)}") from None
    return ray


@dataclass
class Placement:
    """Where a slot runs: what the report names beside each candidate it measured."""

    slot: int
    node: str
    host: str
    pid: int
    gpus: list[str] = field(default_factory=list)
    started: float = 0.0  # time.time() on the slot's node when it started: what it wrote since is its

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "started"}

    def text(self) -> str:
        gpu = f", GPU {','.join(self.gpus)}" if self.gpus else ""
        return f"slot {self.slot} on {self.host} (node {self.node[:8]}, pid {self.pid}{gpu})"


@dataclass
class Done:
    """A call that ended: its value, or the error a local worker's call would have raised."""

    tag: Any
    value: Any = None
    error: WorkerTimeout | WorkerCrashed | WorkerError | None = None
    placement: Placement | None = None
    submitted: float = 0.0  # time.perf_counter() here when it was sent


class _Slot:
    """One evaluation slot: its actor, the ref that says it is loaded, the call in flight."""

    def __init__(self, index: int, actor, setup_ref) -> None:
        self.index, self.actor, self.setup_ref = index, actor, setup_ref
        self.placement: Placement | None = None
        self.call_ref = None
        self.tag: Any = None
        self.deadline = 0.0
        self.timeout = 0.0
        self.submitted = 0.0


class SlotPool:
    """K evaluation slots on the Ray cluster: `idle()` a loaded slot with nothing to do, `submit` a
    call to it, `wait` for the calls that ended; `stop` kills them all."""

    concurrent = True  # several calls at once: the search fills it with `search.spread`

    def __init__(self, source: WorkloadSource, slots: int, cpus: float, gpus: int) -> None:
        self.ray = connect()
        self.asked = slots
        slots = min(slots, self._fitting(cpus, gpus))
        self.source, self.count, self.cpus, self.gpus = source, slots, cpus, gpus
        self.actor_class = self.ray.remote(_SlotActor)
        self.slots: list[_Slot | None] = [None] * slots
        self.starts = 0
        self.replaced: list[str] = []  # why each slot was replaced
        self.not_started: list[str] = []  # slots that could not load the workload, and why
        self.placements: list[Placement] = []  # every slot that loaded, in order
        self.most_at_once = 0  # the most calls in flight together
        for index in range(slots):
            self._launch(index)

    def _fitting(self, cpus: float, gpus: int) -> int:
        """How many slots the cluster can ever hold beside this process (its nodes' totals, less the
        GPU a job's own task holds; a waiting task lends its CPUs); none is a user error."""
        total = self.ray.cluster_resources()
        try:
            own = self.ray.get_runtime_context().get_assigned_resources()  # inside a job's Ray task: its GPU
        except Exception:  # noqa: BLE001 - a driver holds none
            own = {}
        fits = [int((total.get("CPU", 0.0) + 1e-9) // cpus)] if cpus > 0 else []
        if gpus:
            fits.append(int(total.get("GPU", 0.0) - own.get("GPU", 0.0) + 1e-9) // gpus)
        fit = min(fits) if fits else self.asked
        if fit < 1:
            what = f"{gpus} GPU" if gpus and fits[-1] < 1 else f"{cpus:g} CPU"
            raise UserError(f"--executor ray: the Ray cluster has no room for one evaluation slot ({what}) beside this run (it has {total.get('CPU', 0):g} CPU, "
                            f"{total.get('GPU', 0):g} GPU; this run holds {own.get('GPU', 0):g} GPU); add a node, lower AGNITRA_RAY_CPUS, or measure here with --executor local "
                            "(a service job: AGNITRA_RAY_EVALUATORS=0)")
        return fit

    # ---- the pool's state -------------------------------------------------------------------------

    def idle(self) -> _Slot | None:
        self._take_setups(0)
        return next((s for s in self.slots if s is not None and s.placement is not None and s.call_ref is None), None)

    @property
    def in_flight(self) -> int:
        return sum(1 for s in self.slots if s is not None and s.call_ref is not None)

    @property
    def alive(self) -> int:
        """Slots loaded or loading: 0 means no call can run any more."""
        return sum(1 for s in self.slots if s is not None)

    def submit(self, slot: _Slot, tag: Any, fn: Callable, args: tuple, timeout: float) -> None:
        """fn(workload, device, *args) on `slot`, within `timeout` seconds from now."""
        slot.tag, slot.submitted, slot.timeout = tag, time.perf_counter(), timeout
        slot.deadline = time.monotonic() + max(0.0, timeout)
        slot.call_ref = slot.actor.call.remote(fn, args)
        self.most_at_once = max(self.most_at_once, self.in_flight)

    def wait(self, seconds: float) -> list[Done]:
        """The calls that ended within `seconds` (or at once, where one is past its time limit);
        slots that finished loading meanwhile become idle."""
        refs = [s.call_ref for s in self.slots if s is not None and s.call_ref is not None]
        refs += [s.setup_ref for s in self.slots if s is not None and s.placement is None]
        deadlines = [s.deadline for s in self.slots if s is not None and s.call_ref is not None]
        if deadlines:
            seconds = min(seconds, max(0.0, min(deadlines) - time.monotonic()))
        if refs:
            self.ray.wait(refs, num_returns=1, timeout=seconds)
        elif seconds > 0:
            time.sleep(seconds)
        self._take_setups(0)
        return self._take_calls()

    def stop(self) -> None:
        """Kill every slot (their devices and CPUs go back to the cluster)."""
        for index, slot in enumerate(self.slots):
            if slot is not None:
                if slot.placement is None:
                    self.not_started.append(f"slot {index}: not loaded when the search ended (waiting for {self.cpus:g} CPU and {self.gpus} GPU on the cluster, or loading)")
                self.ray.kill(slot.actor, no_restart=True)
                self.slots[index] = None

    def __enter__(self) -> "SlotPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """For the report: the slots asked for, what each asked of Ray, where they ran."""
        return {"executor": "ray", "slots": self.count, "asked": self.asked, "cpus_per_slot": self.cpus, "gpus_per_slot": self.gpus, "slot_starts": self.starts,
                "slots_ran": len(self.placements), "most_at_once": self.most_at_once, "replaced": list(self.replaced),
                "not_started": list(self.not_started), "placements": [p.to_dict() for p in self.placements]}

    # ---- slots started, replaced, answered --------------------------------------------------------

    def _launch(self, index: int, after: Placement | None = None) -> None:
        """A slot in `index`: the first ones spread over the nodes; a replacement on its
        predecessor's node where that node is still there, cleaning what the predecessor left."""
        if after is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            strategy = NodeAffinitySchedulingStrategy(after.node, soft=True)
        else:
            strategy = "SPREAD"
        actor = self.actor_class.options(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0, max_concurrency=1,
                                         scheduling_strategy=strategy).remote()
        extra_path = [p for p in sys.path if p]  # as a local worker gets this process's: a user's modules by reference
        self.slots[index] = _Slot(index, actor, actor.setup.remote(index, self.source, extra_path, after.started if after else 0.0, self.cpus))
        self.starts += 1

    def _take_setups(self, seconds: float) -> None:
        pending = [s for s in self.slots if s is not None and s.placement is None]
        if not pending:
            return
        ready, _ = self.ray.wait([s.setup_ref for s in pending], num_returns=len(pending), timeout=seconds)
        for slot in pending:
            if slot.setup_ref not in ready:
                continue
            try:
                kind, value = self.ray.get(slot.setup_ref)
            except Exception as exc:  # noqa: BLE001 - the actor died while loading: its node, or the load crashed it
                kind, value = "error", f"its process died while loading the workload ({_ray_reason(exc)})"
            if kind == "ready":
                slot.placement = value
                self.placements.append(value)
            else:
                self.not_started.append(f"slot {slot.index}: {value}")
                self.ray.kill(slot.actor, no_restart=True)
                self.slots[slot.index] = None

    def _take_calls(self) -> list[Done]:
        busy = [s for s in self.slots if s is not None and s.call_ref is not None]
        if not busy:
            return []
        ready, _ = self.ray.wait([s.call_ref for s in busy], num_returns=len(busy), timeout=0)
        ended = []
        now = time.monotonic()
        for slot in busy:
            if slot.call_ref in ready:
                ended.append(self._answered(slot))
            elif now >= slot.deadline:
                ended.append(self._expired(slot))
        return ended

    def _answered(self, slot: _Slot) -> Done:
        done = Done(slot.tag, placement=slot.placement, submitted=slot.submitted)
        try:
            reply = self.ray.get(slot.call_ref)
        except self.ray.exceptions.RayActorError as exc:  # the process died under the call, or its node
            done.error = WorkerCrashed(f"the evaluation slot died during the call ({_ray_reason(exc)}): {slot.placement.text()}")
            self._replace(slot, f"{slot.placement.text()} died ({_ray_reason(exc)})")
            return done
        except Exception as exc:  # noqa: BLE001 - what Ray raised for the call: its reason
            done.error = WorkerError(first_line(exc))
            slot.call_ref = None
            return done
        kind, value, user_error, leaving = reply
        if kind == "result":
            done.value = value
        else:
            done.error = WorkerError(value, user_error=user_error)
        slot.call_ref = None
        if leaving:  # the call damaged the slot's device state: a fresh one for the next call
            self.ray.kill(slot.actor, no_restart=True)
            self._launch(slot.index)
            self.replaced.append(f"{slot.placement.text()} left its device state damaged ({leaving})")
        return done

    def _expired(self, slot: _Slot) -> Done:
        self.ray.kill(slot.actor, no_restart=True)
        self.ray.wait([slot.call_ref], timeout=KILL_WAIT_S)
        done = Done(slot.tag, placement=slot.placement, submitted=slot.submitted,
                    error=WorkerTimeout(f"ran past its time limit of {slot.timeout:.0f} s (the call); stopped: {slot.placement.text()}"))
        self._replace(slot, f"{slot.placement.text()} killed: a call ran past its time limit")
        return done

    def _replace(self, slot: _Slot, why: str) -> None:
        self.replaced.append(why)
        self.ray.kill(slot.actor, no_restart=True)
        self._launch(slot.index, after=slot.placement)


def _ray_reason(exc: BaseException) -> str:
    """Why Ray says an actor died, in a few words: its process's exit detail, or its node's death."""
    text = str(exc)
    for said in ("Worker exit detail: ", "The actor is dead because ", "The actor died because "):
        if said in text:
            return text.split(said, 1)[1].strip().splitlines()[0].split(". ")[0].rstrip(".")[:200]
    return first_line(exc)


# ---- the slot's side: this runs in the Ray actor ------------------------------------------------------


class _SlotActor:
    """A Ray actor holding the workload on its device; `call` runs fn(workload, device, *args) as a
    local worker's child does (`isolated.serve`), its errors returned, not raised."""

    def __init__(self) -> None:
        self.workload = self.device = None

    def setup(self, index: int, source: WorkloadSource, extra_path: list[str], clean_since: float, cpus: float):
        import ray

        from agnitra.bench.isolated import _freeze_heap, _warm_imports

        try:
            sys.path.extend(p for p in extra_path if p not in sys.path)
            started = time.time()
            if clean_since:  # the slot this one replaces was killed here, maybe while Inductor wrote a compile
                from agnitra.bench.compile_cache import remove_empty_artifacts

                remove_empty_artifacts(clean_since)
            if source.device.startswith("cuda"):  # Ray shows this actor its one GPU only: cuda:0
                source = dataclasses.replace(source, device="cuda")
            elif cpus >= 1:
                import torch

                torch.set_num_threads(int(cpus))  # the CPUs Ray gave this slot, not the node's
            self.workload, self.device = source.load()
            _warm_imports()
            _freeze_heap()
        except BaseException as exc:  # noqa: BLE001 - the pool reports it; the slot is not started again
            return "error", f"the workload did not load: {first_line(exc)}"
        import socket

        context = ray.get_runtime_context()
        return "ready", Placement(index, context.get_node_id(), socket.gethostname(), os.getpid(), [str(g) for g in ray.get_gpu_ids()], started)

    def call(self, fn: Callable, args: tuple):
        from agnitra.bench.isolated import failure_texts
        from agnitra.device import context_lost, spoiled

        try:
            reply = ("result", fn(self.workload, self.device, *args, progress=_quiet), False)
        except BaseException as exc:  # noqa: BLE001 - a record for the search, as a local worker answers
            reply = ("error", str(exc) if isinstance(exc, UserError) else first_line(exc), isinstance(exc, UserError))
        leaving = spoiled() or context_lost(self.device, failure_texts(reply[:2]))
        return (*reply, leaving)


def _quiet(message: str, fraction: float) -> None:
    """A slot's progress is not streamed: the search says which candidate each slot runs."""

"""`--executor ray`: jobs run as Ray tasks on a real local Ray cluster (a head without CPUs and one
worker node of 2 CPUs and one GPU resource, `ray start --block` processes in a temporary folder,
stopped by their process ids), their lifecycle in the store's queue as for local workers: a CUDA
job is given the GPU; the outcome is recorded once, with the Ray task and node that ran it in the
job's events; cancellation kills the task; a task lost with its node leaves the job to its lease,
which lapses and queues it again; a job's candidates are measured on a Ray evaluation slot. The
same cluster runs `optimize(executor="ray")` from this process: two slots measure one search's
candidates at once, a slot killed under a candidate is blamed on it and replaced. Without Ray
installed, `--executor ray` is one line naming `pip install 'agnitra[ray]'`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from service_server import QUICK_JOB, Server, free_port, onnx_linear, session_cache, wait  # noqa: E402 - tests/: the service's test server

RAY = str(Path(sys.executable).with_name("ray"))
IN_RAY_TASK = re.compile(r"in Ray task ([0-9a-f]{16,}) on node ([0-9a-f]{56}) \(.*, pid (\d+)(, GPU \d+)?\)")


class RayCluster:
    """`ray start --head` and one worker node, each `--block` in its own session; stop() kills what they started, by pid."""

    def __init__(self, env: dict[str, str]) -> None:
        self.temp = tempfile.mkdtemp(prefix="agr", dir="/tmp")  # short: Ray's socket paths live under it
        self.env, self.port = dict(env, RAY_USAGE_STATS_ENABLED="0"), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen] = {}
        self.known: set[psutil.Process] = set()
        self._start("head", "--head", "--num-cpus", "0", "--port", str(self.port), "--include-dashboard=false", "--temp-dir", self.temp,
                    "--object-store-memory", "200000000")

    def add_node(self) -> None:
        """The worker node: jobs (1 CPU each) run there; it says it has a GPU (a Ray resource, not a device)."""
        self._start("node", "--address", self.address, "--num-cpus", "2", "--num-gpus", "1", "--object-store-memory", "100000000")
        self._ready("node")

    def _start(self, name: str, *args: str) -> None:
        with (Path(self.temp) / f"{name}.log").open("w") as out:
            self.processes[name] = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                                    start_new_session=True)

    def ready(self, name: str = "head") -> None:
        self._ready(name)

    def _ready(self, name: str) -> None:
        log = Path(self.temp) / f"{name}.log"
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text():
            assert self.processes[name].poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)

    def tree(self, name: str) -> list:
        """The node's processes now (its `ray start`, raylet, agents, Ray workers and what they started)."""
        root = psutil.Process(self.processes[name].pid)
        found = [root, *root.children(recursive=True)]
        self.known.update(found)
        return found

    def kill_node(self, name: str) -> None:
        for process in self.tree(name):
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.processes[name].wait(30)

    def stop(self) -> None:
        for name in self.processes:
            if self.processes[name].poll() is None:
                self.tree(name)
        for name in reversed(list(self.processes)):
            self.processes[name].send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes
            try:
                self.processes[name].wait(20)
            except subprocess.TimeoutExpired:
                pass
        for process in self.known:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ray-service")
    cluster = RayCluster(dict(os.environ, AGNITRA_CACHE_DIR=str(session_cache(folder))))  # the head starts while the server does
    server = None
    try:
        server = Server(folder, 0)  # no local workers: the worker below runs jobs as Ray tasks
        admin = server.client(server.admin)
        assert admin.post("/v1/projects", json={"name": "team"}).status_code == 201
        linear = admin.post("/v1/models/import", data={"project": "team", "name": "linear"}, files={"file": ("linear.onnx", onnx_linear(folder))}).json()
        cluster.ready("head")
        # the worker connects to the head, the only node yet: the node killed below is not its own
        log = (folder / "worker.log").open("w")
        worker = subprocess.Popen([sys.executable, "-m", "agnitra.cli", "worker", "--executor", "ray", "--data-dir", str(folder / "data"), "--jobs", "4"],
                                  env=dict(server.env, RAY_ADDRESS=cluster.address, AGNITRA_RAY_EVALUATORS="1"), stdout=log, stderr=log, start_new_session=True)
        cluster.add_node()
        yield server, cluster, admin, linear, worker
    finally:
        if "worker" in locals() and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        cluster.stop()
        if server is not None:
            server.stop()


def _spread_transforms(marker: Path) -> None:
    """Transforms for the slots' test, made in a function so that they travel by value: `slot-fast`
    drops the model's slow part, `slot-sleep` waits (up to 90 s) until two processes are applying it,
    then 2 s more (two slots measuring at once, however late the second loads on a loaded VM),
    `slot-exit` kills the process it runs in the first time (as a segfault would), then changes nothing."""
    from torch import nn

    from agnitra.transforms.base import TRANSFORMS, Transform, register_transform

    def fast(model):
        return nn.Sequential(*[nn.Identity() if type(m).__name__ == "Slow" else m for m in model])

    def sleep(model):
        met = marker.parent / "met"
        met.mkdir(exist_ok=True)
        (met / str(os.getpid())).touch()
        deadline = time.monotonic() + 90
        while len(list(met.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        return model

    def exit_once(model):
        if not marker.exists():
            marker.touch()
            os._exit(3)
        return model

    for name, apply in (("slot-fast", fast), ("slot-sleep", sleep), ("slot-exit", exit_once)):
        TRANSFORMS.pop(name, None)
        register_transform(type(f"Slot_{name}", (Transform,), {"name": name, "stage": "module", "description": "test transform",
                                                                  "apply": lambda self, model, ctx, params, apply=apply: apply(model)}))


def _slow_mlp():
    """A tiny MLP with a slow identity in it (200 multiplications by one): what `slot-fast` removes."""
    import torch
    from torch import nn

    from agnitra.workloads.base import TaskKind, Workload

    class Slow(nn.Module):
        def forward(self, x):
            for _ in range(200):
                x = x * 1.0
            return x

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), Slow(), nn.ReLU(), nn.Linear(32, 4)).eval()
    make = lambda seed: (torch.randn(2, 16, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("slow-mlp", model, make(0), TaskKind.GENERIC, batch=2, make_inputs=make)


def test_optimize_measures_candidates_on_ray_slots_at_once(service, tmp_path, monkeypatch):
    """`executor="ray"`: two slots on the cluster's node measure one search's candidates at once; a
    slot killed under a candidate is blamed on it and replaced; the answer is confirmed by the final
    run as ever. (Before the job test below: it kills the node.)"""
    import ray
    import torch

    import agnitra

    _, cluster, _, _, _ = service
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    _spread_transforms(tmp_path / "exited")
    workload = _slow_mlp()
    try:
        fast = agnitra.optimize(workload, device="cpu", transforms=["slot-fast", "slot-sleep", "slot-exit"], strategy="enumerate", peers=[], budget="3m",
                                executor="ray", evaluators=2, out=tmp_path / "run", store=False)
    finally:
        ray.shutdown()
    report, slots = fast.report, fast.report.search["evaluation"]
    assert slots["slots"] == 2 and slots["most_at_once"] == 2, slots
    # the recipes without the step that killed its slot (a crashed step blocks its recipes), and that one, each with where it was measured
    assert {"slot-fast", "slot-sleep", "slot-fast + slot-sleep"} <= {c.name for c in report.candidates} and all(c.measured_on for c in report.candidates)
    pids = {c.measured_on["pid"] for c in report.candidates}
    assert len(pids) >= 2 and os.getpid() not in pids, pids  # measured by two slot processes or more, none of them this one
    # the candidate that killed its slot is blamed for it; the slot was replaced; the run went on
    died = [c for c in report.candidates if c.status != "ok"]
    assert len(died) == 1 and "slot-exit" in died[0].name and "the evaluation slot died during the call" in died[0].reason, [(c.name, c.reason) for c in died]
    assert slots["slot_starts"] == 3 and len(slots["replaced"]) == 1 and f"pid {died[0].measured_on['pid']}) died" in slots["replaced"][0], slots
    assert any(n.startswith(f"evaluation: {len(report.candidates)} measurement(s) on ") for n in report.search["notes"]), report.search["notes"]
    # the answer: the final run on this machine's worker confirmed the fastest correct recipe, as for a local search
    assert report.chosen and "slot-fast" in report.chosen and report.speedup > 1.5, report.verdict
    final = {v.name: v for v in report.bench.variants}[report.chosen]
    assert final.correctness.passed
    x = workload.make_inputs(7)
    assert torch.allclose(fast(*x), workload.model(*x))


def _in_ray_task(job: dict) -> tuple[str, str, int]:
    found = [IN_RAY_TASK.search(e["message"]) for e in job["events"]]
    found = [f for f in found if f]
    assert found, [e["message"] for e in job["events"]]
    return found[-1][1], found[-1][2], int(found[-1][3])


def _wait_for_task(client, job_id: int, worker, seconds: float = 60) -> tuple[str, str, int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the worker exited"
        job = client.get(f"/v1/jobs/{job_id}").json()
        if any(IN_RAY_TASK.search(e["message"]) for e in job["events"]):
            return _in_ray_task(job)
        assert job["status"] in ("queued", "running"), job
        time.sleep(0.2)
    raise AssertionError(job)


def test_jobs_run_as_ray_tasks_cancel_and_survive_a_lost_node(service):
    server, cluster, admin, linear, worker = service
    # a CUDA job asks Ray for a GPU: it runs where Ray gave it one (this machine has no CUDA: the job fails there)
    on_gpu = admin.post("/v1/jobs/optimize", json={"model_id": linear["id"], "settings": {**QUICK_JOB, "device": "cuda"}}).json()
    first = admin.post("/v1/jobs/optimize", json={"model_id": linear["id"], "settings": {**QUICK_JOB, "budget": "150s"}}).json()  # taken next; it ends once its two candidates are measured (its slot loads in 10-60 s on a loaded 2-core VM)
    _wait_for_task(admin, on_gpu["id"], worker)
    failed = wait(admin, on_gpu["id"], seconds=90)
    assert failed["status"] == "failed" and "cuda" in failed["error"].lower(), failed
    assert any(re.search(r"in Ray task \w+ on node \w+ \(.*, GPU 0\)$", e["message"]) for e in failed["events"]), failed["events"]
    # a job runs in a Ray task on the worker node; its outcome and its measurements are recorded once
    task, node, pid = _wait_for_task(admin, first["id"], worker)
    assert pid in {p.pid for p in cluster.tree("node")}, "the job's process is not one of the worker node's"
    assert pid != worker.pid
    done = wait(admin, first["id"], seconds=220)
    assert done["status"] == "done" and done["attempts"] == 1, (done["error"], [e["message"] for e in done["events"]])
    # its candidates were measured on a Ray evaluation slot (AGNITRA_RAY_EVALUATORS=1 here; two at once: the test above), not in the job's process
    report = json.loads((server.folder / "data" / "jobs" / str(first["id"]) / "report.json").read_text())
    assert report["search"]["evaluation"]["slots"] == 1 and report["candidates"], (report["search"]["evaluation"], report["search"]["notes"])
    assert all(c["measured_on"] and c["measured_on"]["pid"] != pid for c in report["candidates"]), report["candidates"]
    assert done["outcome"]["verdict"] and [e["message"] for e in done["events"]].count("done") == 1
    from agnitra.store import counts, open_store

    store = open_store(server.env["AGNITRA_DB_URL"])
    assert counts(store)["runs"] == 1
    store.close()

    # cancelling a running job kills its Ray task (ray.cancel(force=True)): its process is gone
    long = admin.post("/v1/jobs/optimize", json={"model_id": linear["id"], "settings": {**QUICK_JOB, "budget": "5m"}}).json()
    _, _, pid = _wait_for_task(admin, long["id"], worker)
    assert admin.post(f"/v1/jobs/{long['id']}/cancel").status_code in (200, 202)
    lost = admin.post("/v1/jobs/optimize", json={"model_id": linear["id"], "settings": {**QUICK_JOB, "budget": "5m"}}).json()  # taken next
    cancelled = wait(admin, long["id"], seconds=30)
    assert cancelled["status"] == "cancelled", cancelled
    time.sleep(1)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    # a node that dies under a job: the task is lost, the job is not failed; its lease lapses and it is queued again
    _wait_for_task(admin, lost["id"], worker)
    cluster.kill_node("node")
    assert worker.wait(60) == 0, (server.folder / "worker.log").read_text()[-3000:]  # its last job: it exits
    assert "ran 4 job(s)" in (server.folder / "worker.log").read_text()
    requeued = wait(admin, lost["id"], until=("queued", "failed", "done", "cancelled"), seconds=30)
    messages = [e["message"] for e in requeued["events"]]
    assert requeued["status"] == "queued" and requeued["attempts"] == 1, messages
    assert any("(lost with its node: NodeDiedError); queued again once its lease lapses" in m for m in messages), messages
    assert any("stopped renewing its lease: queued again" in m for m in messages), messages


def test_executor_ray_without_ray_or_cluster_is_one_line(tmp_path, monkeypatch, capsys):
    """The CLI's commands as `agnitra` runs them (its exit code and stderr), here in this process."""
    from agnitra.cli import main

    monkeypatch.setenv("AGNITRA_DB_URL", f"sqlite:///{tmp_path}/store.db")
    missing = "error: --executor ray needs Ray, which is not installed: pip install 'agnitra[ray]'"
    with monkeypatch.context() as without_ray:
        without_ray.setitem(sys.modules, "ray", None)  # `import ray` fails as where Ray is not installed
        for command in (["worker", "--executor", "ray", "--jobs", "1"], ["serve", "--executor", "ray", "--port", str(free_port())]):
            assert main([*command, "--data-dir", str(tmp_path / "data")]) == 2
            assert capsys.readouterr().err.strip() == missing
        assert main(["optimize", "zoo:tinylm", "--executor", "ray", "--out", str(tmp_path / "run")]) == 2  # candidates on Ray slots: the same line
        assert capsys.readouterr().err.strip() == missing
    assert main(["optimize", "zoo:tinylm", "--evaluators", "3", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == "error: --evaluators 3 needs --executor ray: the local executor measures one candidate at a time in one worker process"
    nowhere = f"127.0.0.1:{free_port()}"  # a cluster that is not there: one line at once, not ray.init's minutes of retries
    monkeypatch.setenv("RAY_ADDRESS", nowhere)
    expected = f"error: --executor ray cannot reach the Ray cluster at RAY_ADDRESS={nowhere} (Connection refused); start it (`ray start --head`) or fix RAY_ADDRESS"
    for command in (["worker", "--executor", "ray", "--data-dir", str(tmp_path / "data")], ["optimize", "zoo:tinylm", "--executor", "ray", "--out", str(tmp_path / "run")]):
        assert main(command) == 2
        assert capsys.readouterr().err.strip() == expected
    assert not (tmp_path / "store.db").exists()  # refused before the store was opened


def test_slots_are_as_many_as_the_cluster_holds_none_is_one_line():
    """K slots asked of a cluster that can hold fewer beside the run: that many; none: one line naming the numbers and the fix."""
    from types import SimpleNamespace

    from agnitra.bench.ray_slots import SlotPool
    from agnitra.errors import UserError

    def pool(total: dict, own: dict, asked: int) -> SlotPool:
        context = SimpleNamespace(get_assigned_resources=lambda: own)
        made = SlotPool.__new__(SlotPool)
        made.ray, made.asked = SimpleNamespace(cluster_resources=lambda: total, get_runtime_context=lambda: context), asked
        return made

    assert pool({"CPU": 8.0, "GPU": 4.0}, {"CPU": 1.0, "GPU": 1.0}, 8)._fitting(1.0, 1) == 3  # a job's task holds one of the four GPUs
    assert pool({"CPU": 2.0}, {}, 4)._fitting(1.0, 0) == 2
    assert pool({"CPU": 2.0}, {}, 4)._fitting(0.0, 0) == 4  # no CPU asked: no bound
    with pytest.raises(UserError, match=r"^--executor ray: the Ray cluster has no room for one evaluation slot \(1 GPU\) beside this run \(it has 16 CPU, 1 GPU; "
                                        r"this run holds 1 GPU\); .*AGNITRA_RAY_EVALUATORS=0\)$"):
        pool({"CPU": 16.0, "GPU": 1.0}, {"GPU": 1.0}, 2)._fitting(1.0, 1)

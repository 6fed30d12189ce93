"""The service under load on loopback: job submissions and metadata reads from concurrent clients.

    PYTHONPATH=src python benchmarks/service.py [--jobs 500] [--clients 50] [--reads 2000]
        [--loads paced,closed] [--interval 0.5] [--processes 5] [--overhead 3]

For each load model a fresh `agnitra serve` process (no workers: the jobs stay queued, as under a
backlog; the default rate limit) with a SQLite store in a temporary folder, one project, one
uploaded ONNX model and one editor key for each client. `--clients` clients (threads spread over
`--processes` client processes, each thread with its own HTTP connection, so the clients' own
Python does not share the server's interpreter) submit `--jobs` jobs (each with its own
Idempotency-Key), then submit them all again (the same keys: each must answer 200 with the same
job, nothing queued twice), then make `--reads` metadata reads (a job with its events, the model,
the project list, a page of jobs) with the backlog queued. Each phase's clock starts once every
client has connected (and had a health call answered): their start-up is neither timed nor in the
server's CPU figure.

Load models (the clients run on the same 2 cores as the server):
- closed: each client sends its next request as soon as the last returns: the saturation
  throughput, and the latency of 50 requests always in flight.
- paced: each client sends a request every `--interval` seconds (the clients' start times spread
  over one interval), the way a team's people and scripts use the service; a request is timed from
  when it was due, so one held back by its client's previous slow answer counts its wait.
The targets of issue 53 are judged on the paced load: metadata reads p95 < 50 ms, submissions
(first and repeated) p95 < 100 ms, no error, nothing twice, an audit entry for each new job.

Orchestration (`--overhead N`, default 3; issue 53's target: under 2% of a job's time): N jobs one
after another (tiny BERT, the `threads` transform, a budget its few candidates end well within) on
a fresh server with one worker, each timed by its client from submission until it sees the result;
the service's share is that time less the job's whole `api.optimize` call (from its run folder: the
lock file written as the call starts, the reports as it ends; the budget clock, `elapsed_s`, stops
before the reports are written), over that time. The same settings through `agnitra
optimize` N times give the CLI's wall time beside it (its process start included).

Per load and phase: p50/p95/p99/max (ms) per kind of call, errors, requests a second, and the
server's CPU time a request (from /proc). Writes benchmarks/results/service-<device>-<date>.json
(or --out).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import multiprocessing
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import httpx

SCHEMA = "agnitra.bench.service/3"  # 3: every client connected before the clock starts (2 timed their start-up)
TARGETS = {"metadata_p95_ms": 50, "submission_p95_ms": 100, "orchestration_share": 0.02}
READ_KINDS = ("read:job", "read:model", "read:projects", "read:jobs-page")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(folder: Path, workers: int = 0) -> tuple[subprocess.Popen, str, dict, str]:
    port = _free_port()
    db_url = f"sqlite:///{folder}/store.db"
    env = dict(os.environ, AGNITRA_DB_URL=db_url, AGNITRA_CACHE_DIR=str(folder / "cache"))
    log = (folder / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "agnitra.cli", "serve", "--port", str(port), "--workers", str(workers), "--data-dir", str(folder / "data")],
                               env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"first admin key \(shown once; keep it\): (agn_\S+)", (folder / "server.log").read_text())
        if found:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1)
                return process, f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {found[1]}"}, db_url
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    raise SystemExit((folder / "server.log").read_text())


def _cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system, all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """The CPU time every process of the machine has spent so far (/proc/stat: all but idle and iowait)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


LEAD_S = 0.2  # from the moment every client is connected to its first call's clock


def _clients(url: str, ready, interval: float, spread: float, work: list[tuple[int, str, list]]) -> list[tuple]:
    """One client process: a thread per (index, key, calls), each with its own connection; the clock
    starts LEAD_S after every client of every process has connected (`ready`: a barrier of the client
    processes and the parent); closed (interval 0) or one call every `interval` s from its slot."""
    records, lock = [], threading.Lock()
    # one TLS context a process: each httpx.Client loading its own took ~1 s of the 2 cores at a phase's start
    verify = ssl.create_default_context()
    connected, clock = threading.Barrier(len(work) + 1), {}

    def client(index: int, key: str, calls: list) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60, verify=verify) as http:
            http.get("/v1/health")  # the connection opened before the clock starts
            connected.wait(120)
            connected.wait(120)  # the start time set
            start_at = clock["start_at"]
            first = start_at + (index * spread if interval else 0.0)
            time.sleep(max(0.0, first - time.time()))
            for k, (kind, method, path, kwargs) in enumerate(calls):
                due = first + k * interval
                if interval:
                    time.sleep(max(0.0, due - time.time()))
                sent = time.time()
                try:
                    response = http.request(method, path, **kwargs)
                    status, text = response.status_code, response.text[:200]
                    job = response.json().get("id") if kind in ("submit", "resubmit") and status < 300 else None
                except httpx.HTTPError as exc:
                    status, text, job = 0, repr(exc), None
                done = time.time()
                since = due if interval else sent  # paced: from when it was due
                with lock:
                    records.append((kind, (done - since) * 1e3, status, text if status >= 400 or status == 0 else "", kwargs.get("headers", {}).get("Idempotency-Key"), job,
                                    (sent - due) * 1e3 if interval else 0.0))

    threads = [threading.Thread(target=client, args=item) for item in work]
    for thread in threads:
        thread.start()
    connected.wait(120)
    ready.wait(120)
    clock["start_at"] = time.time() + LEAD_S
    connected.wait(120)
    for thread in threads:
        thread.join()
    return records


def _figures(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    if not ordered:
        return {"calls": 0}

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)

    return {"calls": len(ordered), "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99), "max_ms": round(ordered[-1], 2), "mean_ms": round(statistics.fmean(ordered), 2)}


def _phase(pool, ready, process: subprocess.Popen, url: str, keys: list[str], calls: list[list], interval: float, processes: int) -> tuple[dict, list]:
    """Run each client's calls (calls[i]: client i's) in the client processes; figures per kind,
    from the clock's start (the clients' connecting and the server's answers to it not counted)."""
    work = [(i, keys[i], calls[i]) for i in range(len(keys))]
    futures = [pool.submit(_clients, url, ready, interval, interval / len(keys), work[p::processes]) for p in range(processes)]
    ready.wait(120)
    start_at = time.time() + LEAD_S
    cpu0, busy0 = _cpu_s(process.pid), _machine_busy_s()
    records = [r for f in futures for r in f.result()]
    wall = time.time() - start_at
    cpu, busy = _cpu_s(process.pid) - cpu0, _machine_busy_s() - busy0
    kinds = sorted({r[0] for r in records})
    errors = [f"{r[2]} {r[3]}" for r in records if r[2] >= 400 or r[2] == 0]
    doc = {"calls": len(records), "wall_s": round(wall, 2), "requests_per_s": round(len(records) / wall, 1), "server_cpu_s": round(cpu, 2),
           "server_cpu_ms_per_call": round(cpu / len(records) * 1e3, 2), "server_cpu_share": round(cpu / wall, 2),
           "machine_busy_cores": round(busy / wall, 2),  # the server, the clients and anything else running
           "errors": len(errors), "first_errors": errors[:5], "all": _figures([r[1] for r in records]),
           "by_kind": {k: _figures([r[1] for r in records if r[0] == k]) for k in kinds}}
    if interval:
        lags = [r[6] for r in records]
        doc["sent_late"] = {"over_10ms": sum(lag > 10 for lag in lags), "max_ms": round(max(lags), 2)}  # held back by the client's previous call
    return doc, records


def _run_load(name: str, args, interval: float) -> dict:
    from agnitra.service import keys as service_keys
    from agnitra.store import open_store

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    folder = Path(tempfile.mkdtemp(prefix=f"agnitra-service-bench-{name}-"))
    process, url, headers, db_url = _start(folder)
    try:
        admin = httpx.Client(base_url=url, headers=headers, timeout=60)
        admin.post("/v1/projects", json={"name": "load"}).raise_for_status()
        model = admin.post("/v1/models/import", data={"project": "load", "name": "linear"}, files={"file": ("linear.onnx", args.onnx.read_bytes())})
        model.raise_for_status()
        model_id = model.json()["id"]
        store = open_store(db_url)
        with store.session() as session:  # one editor key a client, as a team's people and scripts hold
            keys = [service_keys.create_key(session, f"client {i}", "editor", "load")[1] for i in range(args.clients)]
        store.close()
        submissions = [("submit", "POST", "/v1/jobs/optimize", {"json": {"model_id": model_id, "settings": {"budget": "1m"}}, "headers": {"Idempotency-Key": f"load-{i}"}})
                       for i in range(args.jobs)]
        reads = [(kind, "GET", path, {}) for i in range(args.reads)
                 for kind, path in [((("read:job", f"/v1/jobs/{1 + i % args.jobs}"), ("read:model", f"/v1/models/{model_id}"), ("read:projects", "/v1/projects"),
                                      ("read:jobs-page", "/v1/jobs?limit=20"))[i % 4])]]
        split = lambda calls: [calls[c::args.clients] for c in range(args.clients)]  # noqa: E731
        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.processes, mp_context=spawn) as pool, spawn.Manager() as manager:
            list(pool.map(time.sleep, [0.5] * args.processes))  # every client process started before the first phase
            ready = manager.Barrier(args.processes + 1)  # every client connected: the clock starts
            submit, first = _phase(pool, ready, process, url, keys, split(submissions), interval, args.processes)
            again = [("resubmit", *call[1:]) for call in submissions]
            resubmit, second = _phase(pool, ready, process, url, keys, split(again), interval, args.processes)
            read, _ = _phase(pool, ready, process, url, keys, split(reads), interval, args.processes)
        queued = admin.get("/v1/jobs", params={"status": "queued", "limit": 1}).json()["total"]
        audited = sum(e["action"] == "job.submit" for e in admin.get("/v1/audit/logs", params={"limit": 1000}).json())
    finally:
        process.terminate()
        process.wait(15)
    ids = {r[4]: r[5] for r in first if r[2] == 201}
    same = sum(r[2] == 200 and ids.get(r[4]) == r[5] for r in second)
    return {"interval_s": interval or None, "load_average_at_start": load_at_start, "submit": submit, "resubmit": resubmit, "read": read,
            "queued_jobs": queued, "new_on_first_submission": len(ids), "same_job_on_resubmission": same, "audit_job_submit_entries": audited,
            "nothing_twice": queued == args.jobs == len(ids) == same, "errors": submit["errors"] + resubmit["errors"] + read["errors"]}


OVERHEAD_JOB = {"budget": "60s", "transforms": ["threads"], "peers": [], "device": "cpu"}  # a few candidates: the run ends when they are measured
OVERHEAD_MODEL = {"project": "jobs", "name": "bert", "zoo": "bert-base", "options": {"size": "tiny", "batch": 2}}


def _stamp(text: str | None) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def _run_overhead(jobs: int) -> dict:
    """`jobs` jobs one after another on a server with one worker, and the same settings through
    `agnitra optimize` as many times: the service's time around each run (from submission to its
    result, less the run's own elapsed time) against the job's whole time, and the CLI's wall time."""
    folder = Path(tempfile.mkdtemp(prefix="agnitra-service-bench-overhead-"))
    process, url, headers, db_url = _start(folder, workers=1)
    rows = []
    try:
        admin = httpx.Client(base_url=url, headers=headers, timeout=60)
        admin.post("/v1/projects", json={"name": "jobs"}).raise_for_status()
        model = admin.post("/v1/models/import", json=OVERHEAD_MODEL)
        model.raise_for_status()
        for i in range(jobs):
            submitted = time.time()
            job = admin.post("/v1/jobs/optimize", json={"model_id": model.json()["id"], "settings": OVERHEAD_JOB}).json()
            while job["status"] not in ("done", "failed", "cancelled"):
                time.sleep(0.05)
                job = admin.get(f"/v1/jobs/{job['id']}").json()
            answered = time.time()  # the client sees the result
            if job["status"] != "done":
                raise SystemExit(f"job {job['id']} ended {job['status']}: {job['error']}")
            run_s = _run_folder_s(folder / "data" / "jobs" / str(job["id"]))
            whole = answered - submitted
            rows.append({"job": job["id"], "whole_s": round(whole, 2), "queued_s": round(_stamp(job["started_at"]) - _stamp(job["created_at"]), 2),
                         "started_to_finished_s": round(_stamp(job["finished_at"]) - _stamp(job["started_at"]), 2), "run_s": round(run_s, 2),
                         "run_elapsed_s": _job_elapsed(db_url, job["id"]), "overhead_s": round(whole - run_s, 2), "overhead_share": round((whole - run_s) / whole, 4)})
    finally:
        process.terminate()
        process.wait(30)
    cli = []
    for i in range(jobs):
        out = folder / f"cli-{i}"
        env = dict(os.environ, AGNITRA_DB_URL=f"sqlite:///{folder}/cli.db", AGNITRA_CACHE_DIR=str(folder / "cache"))
        started = time.time()
        done = subprocess.run([sys.executable, "-m", "agnitra.cli", "optimize", "zoo:bert-base", "--size", "tiny", "--batch", "2", "--device", "cpu", "--transforms", "threads",
                               "--peers", "", "--budget", "60s", "--json", "--out", str(out)], env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(done.stderr[-2000:])
        wall = time.time() - started
        cli.append({"wall_s": round(wall, 2), "run_elapsed_s": json.loads(done.stdout)["search"]["elapsed_s"]})
    shares = [r["overhead_share"] for r in rows]
    return {"jobs": rows, "cli": cli, "settings": OVERHEAD_JOB, "model": OVERHEAD_MODEL, "server": "agnitra serve --workers 1, SQLite",
            "mean_overhead_share": round(statistics.fmean(shares), 4), "max_overhead_share": max(shares),
            "job_whole_mean_s": round(statistics.fmean(r["whole_s"] for r in rows), 2), "cli_wall_mean_s": round(statistics.fmean(c["wall_s"] for c in cli), 2)}


def _run_folder_s(run: Path) -> float:
    """`api.optimize`'s whole call in the job, from its run folder: the lock file is written as the
    call starts, the reports (report.html, recipe.json) as it ends."""
    return max(p.stat().st_mtime for p in run.iterdir()) - (run / ".agnitra.lock").stat().st_mtime


def _job_elapsed(db_url: str, job_id: int) -> float:
    from agnitra.store import open_store
    from agnitra.store.service_schema import JobRow

    store = open_store(db_url)
    with store.session() as session:
        elapsed = session.get(JobRow, job_id).result["search"]["elapsed_s"]
    store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--loads", default="paced,closed", help="paced, closed or both (comma-separated; paced first: the load average at its start is not the closed run's own)")
    parser.add_argument("--interval", type=float, default=0.5, help="paced: seconds between one client's requests")
    parser.add_argument("--processes", type=int, default=5, help="client processes the clients' threads are spread over")
    parser.add_argument("--overhead", type=int, default=3, help="jobs run one after another on a server with one worker, and as many `agnitra optimize` runs: "
                        "the service's time around each run (0: not measured)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--note", default="", help="a line for the result's conditions, e.g. which code the server ran")
    args = parser.parse_args()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    import torch

    from agnitra.api import describe_device
    from result_file import write_result

    args.onnx = Path(tempfile.mkdtemp(prefix="agnitra-service-bench-")) / "linear.onnx"
    torch.onnx.export(torch.nn.Linear(8, 4), (torch.randn(2, 8),), str(args.onnx), dynamo=False)
    loads = {name: _run_load(name, args, args.interval if name == "paced" else 0.0) for name in args.loads.split(",") if name}
    overhead = _run_overhead(args.overhead) if args.overhead else None
    summary: dict = {"met": {}}
    if loads:
        judged = loads.get("paced") or next(iter(loads.values()))
        submission_p95 = max(judged["submit"]["by_kind"]["submit"]["p95_ms"], judged["resubmit"]["by_kind"]["resubmit"]["p95_ms"])
        summary = {"judged_on": "paced" if "paced" in loads else args.loads, "metadata_p95_ms": judged["read"]["all"]["p95_ms"], "submission_p95_ms": submission_p95,
                   "errors": sum(load["errors"] for load in loads.values()), "nothing_twice": all(load["nothing_twice"] for load in loads.values()),
                   "audit_entry_for_every_job": all(load["audit_job_submit_entries"] == args.jobs for load in loads.values()),
                   "met": {"metadata": judged["read"]["all"]["p95_ms"] < TARGETS["metadata_p95_ms"], "submission": submission_p95 < TARGETS["submission_p95_ms"]}}
    if overhead:
        summary["orchestration_overhead_share"] = overhead["max_overhead_share"]
        summary["met"]["orchestration"] = overhead["max_overhead_share"] < TARGETS["orchestration_share"]
    report = describe_device("cpu")
    tag = re.sub(r"[^a-z0-9]+", "-", report.name.lower()).strip("-")
    out = Path(args.out or Path(__file__).parent / "results" / f"service-{tag}-{dt.date.today().isoformat()}.json")
    conditions = {"jobs": args.jobs, "clients": args.clients, "reads": args.reads, "client_processes": args.processes, "cores": os.cpu_count(),
                  "load_average_at_start": load_at_start, "server": "agnitra serve, one Uvicorn process, --workers 0, default rate limit (600/min a key)",
                  "keys": "one editor key of the project a client", "store": "SQLite in a temporary folder, a fresh server and store a load", "loopback": True,
                  "loads": {"closed": "each client's next request as soon as its last returned", "paced": f"each client a request every {args.interval} s, "
                            f"{args.clients / args.interval:.0f} requests a second in all, timed from when it was due"},
                  "targets": TARGETS, "judged_on": "paced", "uvicorn": "httptools + uvloop" if find_spec("httptools") and find_spec("uvloop") else "h11 + asyncio",
                  "note": args.note}
    write_result(out, SCHEMA, report, conditions=conditions, summary=summary, loads=loads, overhead=overhead)
    print(f"wrote {out}: {summary}")
    if overhead:
        for row in overhead["jobs"]:
            print(f"job {row['job']}: {row['whole_s']} s from submission to result, the run {row['run_s']} s (its budget clock {row['run_elapsed_s']} s, "
                  f"then its reports), the service {row['overhead_s']} s ({row['overhead_share']:.1%}); queued {row['queued_s']} s")
        print(f"the same through `agnitra optimize`: wall {[c['wall_s'] for c in overhead['cli']]} s, its run {[c['run_elapsed_s'] for c in overhead['cli']]} s")
    for name, load in loads.items():
        for phase in ("submit", "resubmit", "read"):
            doc = load[phase]
            kinds = " ".join(f"{k} p50 {f['p50_ms']} p95 {f['p95_ms']} p99 {f['p99_ms']} max {f['max_ms']}" for k, f in doc["by_kind"].items())
            print(f"{name} {phase}: {doc['requests_per_s']} req/s, server CPU {doc['server_cpu_ms_per_call']} ms/call ({doc['server_cpu_share']} cores, "
                  f"machine {doc['machine_busy_cores']}); {kinds}")


if __name__ == "__main__":
    main()

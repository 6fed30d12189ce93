"""The service under load on loopback: job submissions and metadata reads from concurrent clients.

    PYTHONPATH=src python benchmarks/service.py [--jobs 500] [--clients 50] [--reads 2000]

One `agnitra serve` process (no workers: the jobs stay queued, as under a backlog) with a SQLite
store in a temporary folder, one project and one uploaded ONNX model. `--clients` threads, each
with its own HTTP connection, submit `--jobs` jobs (each with its own Idempotency-Key), then submit
them all again (the same keys: nothing may be queued twice), then make `--reads` metadata reads
(a job's status, the model, the project list, a page of jobs) with the backlog queued. Per kind of
call: p50/p95/p99 and the maximum in milliseconds, the errors, and the jobs in the queue at the end.
Targets (issue 53): metadata reads p95 < 50 ms, submissions p95 < 100 ms, no error, nothing twice.

Writes benchmarks/results/service-<device>-<date>.json (or --out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import torch

from agnitra.api import describe_device
from result_file import write_result

SCHEMA = "agnitra.bench.service/1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(folder: Path) -> tuple[subprocess.Popen, str, dict]:
    port = _free_port()
    env = dict(os.environ, AGNITRA_DB_URL=f"sqlite:///{folder}/store.db", AGNITRA_CACHE_DIR=str(folder / "cache"))
    log = (folder / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "agnitra.cli", "serve", "--port", str(port), "--workers", "0", "--data-dir", str(folder / "data")],
                               env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"first admin key \(shown once; keep it\): (agn_\S+)", (folder / "server.log").read_text())
        if found:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1)
                return process, f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {found[1]}"}
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    raise SystemExit((folder / "server.log").read_text())


def _in_clients(count: int, calls: list, url: str, headers: dict) -> tuple[list[float], list[str]]:
    """Make `calls` ((method, path, kwargs)) from `count` clients at once; latencies (ms) and errors."""
    latencies, errors, lock, todo = [], [], threading.Lock(), list(enumerate(calls))

    def client() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            while True:
                with lock:
                    if not todo:
                        return
                    _, (method, path, kwargs) = todo.pop()
                started = time.perf_counter()
                try:
                    response = http.request(method, path, **kwargs)
                    ok = response.status_code < 400
                    text = f"{response.status_code} {response.text[:120]}"
                except httpx.HTTPError as exc:
                    ok, text = False, repr(exc)
                elapsed = (time.perf_counter() - started) * 1e3
                with lock:
                    latencies.append(elapsed)
                    if not ok:
                        errors.append(text)

    threads = [threading.Thread(target=client) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors


def _figures(latencies: list[float], errors: list[str]) -> dict:
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)

    return {"calls": len(latencies), "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99), "max_ms": round(ordered[-1], 2),
            "mean_ms": round(statistics.fmean(ordered), 2), "errors": len(errors), "first_errors": errors[:5]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="agnitra-service-bench-"))
    process, url, headers = _start(folder)
    try:
        admin = httpx.Client(base_url=url, headers=headers, timeout=60)
        admin.post("/v1/projects", json={"name": "load"})
        onnx = folder / "linear.onnx"
        torch.onnx.export(torch.nn.Linear(8, 4), (torch.randn(2, 8),), str(onnx), dynamo=False)
        model = admin.post("/v1/models/import", data={"project": "load", "name": "linear"}, files={"file": ("linear.onnx", onnx.read_bytes())}).json()
        submissions = [("POST", "/v1/jobs/optimize", {"json": {"model_id": model["id"], "settings": {"budget": "1m"}}, "headers": {"Idempotency-Key": f"load-{i}"}})
                       for i in range(args.jobs)]
        submit = _figures(*_in_clients(args.clients, submissions, url, headers))
        resubmit = _figures(*_in_clients(args.clients, submissions, url, headers))
        queued = admin.get("/v1/jobs", params={"status": "queued", "limit": 1}).json()["total"]
        reads = [("GET", path, {}) for i in range(args.reads)
                 for path in [(f"/v1/jobs/{1 + i % args.jobs}", f"/v1/models/{model['id']}", "/v1/projects", "/v1/jobs?limit=20")[i % 4]]]
        read = _figures(*_in_clients(args.clients, reads, url, headers))
    finally:
        process.terminate()
        process.wait(15)
    report = describe_device("cpu")
    targets = {"metadata_p95_ms": 50, "submission_p95_ms": 100}
    summary = {"queued_jobs": queued, "submitted": args.jobs, "nothing_twice": queued == args.jobs, "errors": submit["errors"] + resubmit["errors"] + read["errors"],
               "metadata_p95_ms": read["p95_ms"], "submission_p95_ms": submit["p95_ms"],
               "met": {"metadata": read["p95_ms"] < targets["metadata_p95_ms"], "submission": submit["p95_ms"] < targets["submission_p95_ms"]}}
    tag = re.sub(r"[^a-z0-9]+", "-", report.name.lower()).strip("-")
    out = Path(args.out or Path(__file__).parent / "results" / f"service-{tag}-{dt.date.today().isoformat()}.json")
    write_result(out, SCHEMA, report, conditions={"jobs": args.jobs, "clients": args.clients, "reads": args.reads, "server": "agnitra serve, one Uvicorn process, --workers 0",
                                                  "store": "SQLite in a temporary folder", "loopback": True, "targets": targets, "cores": os.cpu_count()},
                 summary=summary, submit=submit, resubmit=resubmit, read=read)
    print(f"wrote {out}: {summary}")


if __name__ == "__main__":
    main()

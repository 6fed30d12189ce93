"""Candidates measured in one budget: one local worker against K Ray evaluation slots (`--executor ray`).

    PYTHONPATH=src:benchmarks python benchmarks/ray_evaluation.py --slots 1,2

Starts a local Ray cluster of one node (`ray start --head --block --num-cpus N`, N = this machine's
cores unless --cpus; stopped by its process id), then runs `agnitra optimize` as a user does, once
with `--executor local` and once per K with `--executor ray --evaluators K` (AGNITRA_RAY_CPUS =
N / K: the same cores shared out), the same workload, transforms, strategy (`enumerate`: one order
for every run) and budget, no peers, each with a store of its own. Per run, from its report.json:
how far into that one order the budget took it (the candidates measured, and their own seconds,
slots added up), the slots that loaded and the most measured at once, the seconds of each stage,
the answer and its speedup, and the load average around it. A count depends on where the budget
ends in the order: a run that reaches a stretch of lossy recipes refused by their quick check
(0.3 s each) counts many more.

Writes benchmarks/results/ray-evaluation-cpu-<date>.json (or --out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = "agnitra.bench.ray-evaluation/1"
# CPU transforms (`threads` left out: its count=0 takes the node's cores, not the slot's CPUs)
TRANSFORMS = "fuse-projections,precision,dynamic-int8,int8-weight-only,int4-weight-only,mixed-precision"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="zoo:bert-base")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--batch", default="2")
    parser.add_argument("--seq-len", default="16")
    parser.add_argument("--transforms", default=TRANSFORMS)
    parser.add_argument("--budget", default="120s")
    parser.add_argument("--slots", default="1,2", help="comma-separated K: one --executor ray run each, after the local one")
    parser.add_argument("--cpus", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=str(HERE / "results" / f"ray-evaluation-cpu-{dt.date.today().isoformat()}.json"))
    args = parser.parse_args()

    from agnitra.api import describe_device
    from result_file import write_result

    work = Path(tempfile.mkdtemp(prefix="agre", dir="/tmp"))  # short: Ray's socket paths live under it
    head = _start_head(work, args.cpus)
    runs = []
    try:
        for k in [0] + [int(k) for k in args.slots.split(",")]:
            runs.append(_run(args, work, head["address"], k))
            write_result(args.out, SCHEMA, describe_device("cpu"), workload=args.workload, size=args.size, batch=args.batch, seq_len=args.seq_len,
                         transforms=args.transforms, budget=args.budget, cluster={"nodes": 1, "cpus": args.cpus}, runs=runs)
            print(json.dumps(runs[-1]), flush=True)
    finally:
        _stop(head["process"])
        shutil.rmtree(work, ignore_errors=True)


def _run(args, work: Path, address: str, slots: int) -> dict:
    name = f"ray-{slots}" if slots else "local"
    out = work / name
    env = dict(os.environ, AGNITRA_DB_URL=f"sqlite:///{work}/{name}.db", RAY_ADDRESS=address, AGNITRA_RAY_CPUS=f"{args.cpus / max(1, slots):g}")
    command = [sys.executable, "-m", "agnitra.cli", "optimize", args.workload, "--size", args.size, "--batch", args.batch, "--seq-len", args.seq_len,
               "--device", "cpu", "--transforms", args.transforms, "--strategy", "enumerate", "--peers", "", "--budget", args.budget, "--out", str(out), "--json"]
    command += ["--executor", "ray", "--evaluators", str(slots)] if slots else []
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        return {"run": name, "error": done.stderr.strip().splitlines()[-1:] or [str(done.returncode)], "wall_s": round(wall, 1)}
    report = json.loads((out / "report.json").read_text())
    search = report["search"]
    evaluation = search.get("evaluation") or {}
    return {"run": name, "executor": "ray" if slots else "local", "slots": evaluation.get("slots", 1), "cpus_per_slot": evaluation.get("cpus_per_slot"),
            "slots_loaded": evaluation.get("slots_ran"), "most_at_once": evaluation.get("most_at_once", 1), "measured": search["evaluated"],
            "space": search["space_size"], "ok": sum(1 for c in report["candidates"] if c["status"] == "ok"),
            "candidate_s": round(sum(c.get("eval_s") or 0.0 for c in report["candidates"]), 1),  # the candidates' own seconds, slots added up
            "time_s": search.get("time_s"), "elapsed_s": search.get("elapsed_s"), "wall_s": round(wall, 1), "chosen": report["chosen"],
            "speedup": report["speedup"], "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def _start_head(work: Path, cpus: int) -> dict:
    """One node of `cpus` CPUs, `ray start --block` in a session of its own (stopped by its pid)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (work / "head.log").open("w")
    ray = str(Path(sys.executable).with_name("ray"))
    process = subprocess.Popen([ray, "start", "--block", "--disable-usage-stats", "--head", "--num-cpus", str(cpus), "--port", str(port), "--include-dashboard=false",
                                "--temp-dir", str(work / "ray"), "--object-store-memory", "200000000"], stdout=log, stderr=subprocess.STDOUT,
                               env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"), start_new_session=True)
    deadline = time.monotonic() + 120
    while "Ray runtime started" not in (work / "head.log").read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            raise SystemExit(f"the Ray head did not start: {(work / 'head.log').read_text()[-2000:]}")
        time.sleep(0.5)
    return {"process": process, "address": f"127.0.0.1:{port}"}


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to `ray start --block` stops the node's processes; what is left of its session after 30 s is killed."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()

"""Peer benchmark: every zoo workload with every built-in peer variant, one result file per device.

    PYTHONPATH=src python benchmarks/peers.py --preset cpu
    PYTHONPATH=src python benchmarks/peers.py --preset h100 --cases llama-1b-decode,bert-base-b1

Writes benchmarks/results/peers-<device>-<date>.json (or --out-file). Each case is written as
soon as it finishes and merged into an existing file of the same name, so a long preset can be
run in several commands and an interrupted run keeps what it measured. The variants of one case
are measured interleaved in one process; compare figures only within a case.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from agnitra import api
from agnitra.device import resolve_device
from agnitra.results import to_dict
from agnitra.telemetry.signature import software_versions

GPU_PEERS = ["eager", "compile", "compile-max-autotune", "compile-reduce-overhead", "onnxruntime"]
GPU_DECODE_PEERS = ["eager", "compile", "compile-reduce-overhead", "compile-max-autotune"]
CPU_PEERS = ["eager", "compile", "onnxruntime", "onnxruntime-int8"]


@dataclass
class Case:
    id: str
    model: str
    variants: list[str]
    options: dict = field(default_factory=dict)  # passed to api.benchmark (batch, seq_len, tokens, dtype, runs...)


PRESETS: dict[str, list[Case]] = {
    "h100": [
        # decoders: one warm-up generation (127 steps: enough to compile and record CUDA graphs),
        # 3 timed generations = 381 per-token samples per variant
        Case("llama-1b-decode", "zoo:llama-1b", GPU_DECODE_PEERS, dict(batch=1, seq_len=32, tokens=128, dtype="bf16", runs=3, warmup=1)),
        Case("bert-base-b1", "zoo:bert-base", GPU_PEERS, dict(batch=1, seq_len=128, dtype="fp16")),
        Case("bert-base-b32", "zoo:bert-base", GPU_PEERS, dict(batch=32, seq_len=128, dtype="fp16")),
        Case("llama-8b-decode", "zoo:llama-8b", GPU_DECODE_PEERS, dict(batch=1, seq_len=32, tokens=128, dtype="bf16", runs=3, warmup=1)),
        # short sets for a tight device budget: the best peer of the decoders (reduce-overhead, as
        # gpt-fast) without the 90-100 s compiles of the others on the 8B model
        Case("llama-8b-decode-short", "zoo:llama-8b", ["eager", "compile-reduce-overhead"], dict(batch=1, seq_len=32, tokens=128, dtype="bf16", runs=3, warmup=1)),
        Case("resnet50-short-b1", "zoo:resnet50", ["eager", "compile", "compile-reduce-overhead"], dict(batch=1, dtype="fp16")),
        Case("resnet50-short-b64", "zoo:resnet50", ["eager", "compile", "compile-reduce-overhead"], dict(batch=64, dtype="fp16")),
        Case("resnet50-b1", "zoo:resnet50", GPU_PEERS, dict(batch=1, dtype="fp16")),
        Case("resnet50-b64", "zoo:resnet50", GPU_PEERS, dict(batch=64, dtype="fp16")),
        Case("mamba-b1", "zoo:mamba", ["eager", "compile", "compile-reduce-overhead"], dict(batch=1, seq_len=64, dtype="bf16")),
        Case("whisper-tiny-b1", "zoo:whisper-tiny", ["eager", "compile", "compile-reduce-overhead"], dict(batch=1, seq_len=32, dtype="fp16")),
    ],
    "cpu": [
        Case("minilm-b1", "zoo:minilm", CPU_PEERS, dict(batch=1, seq_len=128)),
        Case("bert-base-b1", "zoo:bert-base", CPU_PEERS, dict(batch=1, seq_len=128, runs=30)),
        Case("tinylm-decode", "zoo:tinylm", ["eager", "compile"], dict(batch=1, seq_len=32, tokens=64)),
    ],
}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def headline(report) -> dict:
    """The figures a reader compares: per variant status, latency, throughput, correctness."""
    rows = {}
    for v in report.variants:
        row = {"status": v.status}
        if v.status != "ok":
            row["reason"] = v.reason
        else:
            row.update(
                median_ms=round(v.latency_ms.median, 4),
                p95_ms=round(v.latency_ms.p95, 4),
                throughput=f"{v.throughput.value:.1f} {v.throughput.unit}",
                roofline=None if v.roofline_fraction is None else round(v.roofline_fraction, 3),
                correctness=None if v.correctness is None else f"{v.correctness.metric}={v.correctness.value} passed={v.correctness.passed}",
                setup_s=v.setup_s,
            )
        rows[v.name] = row
    ok = [v for v in report.variants if v.status == "ok"]
    best = min(ok, key=lambda v: v.latency_ms.median) if ok else None
    peers = [v for v in ok if v.name != "eager"]
    best_peer = min(peers, key=lambda v: v.latency_ms.median) if peers else None
    return {
        "variants": rows,
        "fastest": best.name if best else None,
        "best_peer": best_peer.name if best_peer else None,
        "best_peer_speedup_vs_eager": _speedup(report, best_peer),
    }


def _speedup(report, variant) -> float | None:
    try:
        eager = report.variant("eager")
    except KeyError:
        return None
    if variant is None or eager.status != "ok":
        return None
    return round(eager.latency_ms.median / variant.latency_ms.median, 3)


def _log_progress(t0: float):
    last = [""]

    def progress(message: str, fraction: float) -> None:
        if message != last[0]:  # one line per stage, with the seconds since the case began
            last[0] = message
            print(f"  [{time.perf_counter() - t0:7.1f}s] {message}", file=sys.stderr, flush=True)

    return progress


def run_case(case: Case, device: torch.device) -> dict:
    t0 = time.perf_counter()
    try:
        report = api.benchmark(case.model, variants=case.variants, device=device, progress=_log_progress(t0), **case.options)
    except Exception as exc:  # noqa: BLE001 - one broken case must not lose the others
        return {"id": case.id, "model": case.model, "status": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)}
    doc = to_dict(report)
    doc["op_breakdown"] = doc["op_breakdown"][:15]
    return {"id": case.id, "model": case.model, "status": "ok", "wall_s": round(time.perf_counter() - t0, 1), "headline": headline(report), "report": doc}


def write(path: Path, device_doc: dict, cases: list[dict], preset: str) -> None:
    """Merge `cases` into the file at `path`, in the preset's order."""
    existing = json.loads(path.read_text()) if path.is_file() else {}
    merged = {c["id"]: c for c in existing.get("cases", [])}
    merged.update({c["id"]: c for c in cases})
    order = {c.id: i for i, c in enumerate(PRESETS[preset])}
    doc = {
        "schema": "agnitra.peers/1",
        "date": dt.date.today().isoformat(),
        "device": device_doc,
        "versions": software_versions(),
        "command": " ".join(sys.argv),
        "note": "variants of one case are measured interleaved in one process; compare figures within a case only",
        "cases": sorted(merged.values(), key=lambda c: order.get(c["id"], len(order))),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--cases", default="", help="comma-separated case ids (default: all of the preset)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--out-file", default=None)
    args = parser.parse_args()
    wanted = [c for c in PRESETS[args.preset] if not args.cases or c.id in args.cases.split(",")]
    device = resolve_device(args.device)
    device_report = api.describe_device(device)
    device_doc = to_dict(device_report)
    path = Path(args.out_file or f"benchmarks/results/peers-{_slug(device_report.name)}-{dt.date.today().isoformat()}.json")
    done = []
    for case in wanted:
        print(f"== {case.id}: {case.model} {case.options} variants {case.variants}", flush=True)
        result = run_case(case, device)
        done.append(result)
        write(path, device_doc, done, args.preset)
        print(json.dumps(result.get("headline") or result.get("error"), indent=1), flush=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

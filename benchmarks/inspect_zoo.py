"""Inspect benchmark: `agnitra inspect` on every zoo workload, plus signature neighbours and ONNX parity.

    PYTHONPATH=src python benchmarks/inspect_zoo.py --device cpu

Writes benchmarks/results/inspect-<device>-<date>.json: per workload the wall time of a full
`inspect` (capture, costs, measured time, signature), IR source and size, graph breaks, measured
step time, the share of it attributed to named modules and the top hotspots; the nearest
neighbour of each workload's (untimed) signature; and for minilm the FLOPs of its ONNX export
imported into the IR against the PyTorch capture.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

from agnitra import api
from agnitra.device import resolve_device
from agnitra.ir import capture, signature
from agnitra.report.schema import to_dict
from agnitra.telemetry.signature import software_versions
from agnitra.workloads.registry import BuildOptions, build_workload, zoo_entries

TOO_BIG_FOR_CPU = {"llama-8b": "32 GB of fp32 weights; this machine has 24 GB"}


def inspect_row(name: str, device) -> dict:
    t0 = time.perf_counter()
    report = api.inspect(f"zoo:{name}", device=device)
    ir = report.ir
    return {
        "workload": name, "wall_s": round(time.perf_counter() - t0, 1), "source": ir.source, "nodes": len(ir.nodes),
        "graph_breaks": len(ir.graph_breaks), "gflop": ir.total_flops / 1e9, "measured_ms": report.timing.get("measured_ms"),
        "resource": report.timing.get("resource"), "attributed_share": report.timing.get("attributed_share"),
        "top_hotspots": [{"module": h.module, "kind": h.kind, "share": h.share, "bound": h.bound} for h in report.hotspots[:5]],
    }


def neighbours(names: list[str], device) -> dict:
    sigs = {}
    for name in names:
        w = build_workload(name, BuildOptions(device=device))
        sigs[name] = signature(capture(w.model, w.example_inputs, name))
    return {a: min(((b, sigs[a].distance(sigs[b])) for b in sigs if b != a), key=lambda x: x[1]) for a in sigs}


def onnx_parity(device) -> dict:
    from agnitra.ir.onnx_import import import_onnx
    from agnitra.ort.export import export_onnx

    w = build_workload("minilm", BuildOptions(device=device))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "minilm.onnx"
        export_onnx(w, path)
        onnx_ir = import_onnx(path, input_shapes={"input_ids": list(w.example_inputs[0].shape), "attention_mask": list(w.example_inputs[1].shape)})
    torch_ir = capture(w.model, w.example_inputs, "minilm")
    return {"torch_gflop": torch_ir.total_flops / 1e9, "onnx_gflop": onnx_ir.total_flops / 1e9, "torch_mix": torch_ir.op_mix(), "onnx_mix": onnx_ir.op_mix()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out-file", default=None)
    args = parser.parse_args()
    device = resolve_device(args.device)
    report = api.describe_device(device)
    rows, skipped = [], {}
    for entry in zoo_entries():
        if device.type == "cpu" and entry.name in TOO_BIG_FOR_CPU:
            skipped[entry.name] = TOO_BIG_FOR_CPU[entry.name]
            continue
        print(f"== {entry.name}", flush=True)
        rows.append(inspect_row(entry.name, device))
        print(json.dumps(rows[-1], default=str)[:400], flush=True)
    doc = {
        "schema": "agnitra.inspect-bench/1", "date": dt.date.today().isoformat(), "device": to_dict(report), "versions": software_versions(),
        "command": " ".join(sys.argv), "note": "full-size zoo workloads, default shapes, inspect --runs 10", "rows": rows, "skipped": skipped,
        "signature_nearest_neighbour": neighbours(["bert-base", "minilm", "tinylm", "resnet50", "whisper-tiny"], device),
        "onnx_parity_minilm": onnx_parity(device),
    }
    slug = "".join(ch if ch.isalnum() else "-" for ch in report.name.lower()).strip("-")
    path = Path(args.out_file or f"benchmarks/results/inspect-{slug}-{dt.date.today().isoformat()}.json")
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

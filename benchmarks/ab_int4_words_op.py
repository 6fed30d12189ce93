"""The int4 layer's batch-1 call through the words-only op (`int4_words_linear`) against the op over
packed bytes + words (`int4_weight_only_linear`), layer by layer, in CUDA graphs.

    PYTHONPATH=src python benchmarks/ab_int4_words_op.py --shapes 2560x2048,11264x2048 --out-file out.json

Per N x K: enough layers of each kind that their weights pass L2, called one after another as
decode calls them; each kind's chain captured in one CUDA graph, replayed in interleaved rounds;
the median per call. Both chains' outputs are compared (they run the same kernel and config).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path
from unittest import mock

import torch

from agnitra.kernels import modules as km
from agnitra.telemetry.signature import software_versions


def layers(n: int, k: int, count: int, both: bool) -> list[km.TritonInt4Linear]:
    out = []
    with mock.patch.object(km, "_batch1_reads_packed", lambda *args: both):
        for i in range(count):
            torch.manual_seed(i)
            out.append(km.TritonInt4Linear.from_linear(torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16), 128))
    return out


def chain_graph(mods, x):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            ys = [m(x) for m in mods]
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ys = [m(x) for m in mods]
    return graph, ys


def time_graph(graph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="2560x2048,2048x2048,11264x2048,2048x5632,32000x2048")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        count = max(2, -(-120_000_000 // (n * k // 2)))  # past the 50 MB L2 several times over
        one, both = layers(n, k, count, False), layers(n, k, count, True)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        (g1, y1), (g2, y2) = chain_graph(one, x), chain_graph(both, x)
        times = {"words only": [], "packed + words": []}
        for _ in range(args.rounds):
            times["words only"].append(time_graph(g1))
            times["packed + words"].append(time_graph(g2))
        g1.replay(); g2.replay(); torch.cuda.synchronize()
        same = all(torch.equal(a, b) for a, b in zip(y1, y2))
        row = {"shape": [1, n, k, 128], "layers": count, "kept": [one[0].weight is None, both[0].weight is None], "outputs_equal": same,
               **{f"{name}_us_per_call": statistics.median(t) * 1e3 / count for name, t in times.items()}}
        rows.append(row)
        print(json.dumps(row))
    doc = {"date": dt.date.today().isoformat(), "device": torch.cuda.get_device_name(), "versions": software_versions(),
           "command": " ".join(["benchmarks/ab_int4_words_op.py", *sys.argv[1:]]), "rounds": args.rounds, "rows": rows}
    Path(args.out_file).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

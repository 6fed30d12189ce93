"""Equal-quality compression for int4 weight-only groups (issue 54): `agnitra.layout` of a trained
decoder with quant:int4:gG for each group size G, modes none and once, every mode's held-out
perplexity window by window; then every pair of (G, mode) compared on the same windows (the
windows' differences of log-ratios resampled, 95%). A pair answers "fewer bits at equal quality"
where the smaller model's perplexity is not above the larger one's beyond its interval.

    PYTHONPATH=src python benchmarks/layout_groups.py [--groups 32,64,128,256] [--check-positions 8192] [--solve-seconds 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
from pathlib import Path

from agnitra.api import describe_device, layout
from agnitra.verify.perplexity import paired_change
from result_file import write_result

SCALE_BITS = 32  # an fp16 scale and an fp16 offset a group
FLOAT_BITS = 32  # a weight the step leaves as it was (the CPU run's float32)


def bits_per_weight(group: int, changed: int = 1, left: int = 0) -> float:
    """Over the layers the step could take: int4 with its group's scale and offset where it
    converted, float where the layer's shape does not divide into its groups."""
    return (changed * (4 + SCALE_BITS / group) + left * FLOAT_BITS) / (changed + left)


def measured(workload: str, group: int, modes: list[str], solve_seconds: float, check_positions: int, runs: int) -> dict[str, dict]:
    """(G, mode) -> its rise, interval, weight error and window log-ratios, from one layout run."""
    doc = layout(f"zoo:{workload}", transforms=f"quant:int4:g{group}", modes=modes, device="cpu", solve_seconds=solve_seconds,
                 check_positions=check_positions, runs=runs)
    rows = {}
    for mode in doc["modes"]:
        quality = mode["quality"] or {}
        step = mode["steps"][-1] if mode.get("steps") else {}
        changed, left = step.get("weights_changed", 0), step.get("weights_left", 0)
        rows[f"g{group} {mode['mode']}"] = {
            "bits_per_weight": round(bits_per_weight(group, changed, left), 3),
            "int4_bits_per_converted_weight": bits_per_weight(group),
            "weights_changed": changed, "weights_left": left,
            "perplexity_rise_pct": round(100 * quality["value"], 3) if quality.get("value") is not None else None,
            "ci95_pct": [round(100 * x, 3) for x in quality["ci95"]] if quality.get("ci95") else None,
            "weight_error": step.get("weight_error"),
            "window_log_ratios": quality.get("window_log_ratios"),
        }
    return rows


def pairs(rows: dict[str, dict]) -> list[dict]:
    """Every two rows on the same windows: the fewer-bits one's perplexity against the other's."""
    out = []
    for a, b in itertools.combinations(rows, 2):
        small, large = sorted((a, b), key=lambda k: rows[k]["bits_per_weight"])
        if rows[small]["bits_per_weight"] == rows[large]["bits_per_weight"]:
            small, large = b, a  # same bits (none against once): the later mode against the earlier
        change = paired_change(rows[large]["window_log_ratios"], rows[small]["window_log_ratios"])
        if change is None:
            continue
        low, high = change["ci95"] if change["ci95"] else (None, None)
        out.append({"fewer_bits": small, "against": large, "change_pct": round(100 * change["value"], 3),
                    "ci95_pct": [round(100 * low, 3), round(100 * high, 3)] if low is not None else None,
                    "equal_or_better": high is not None and high <= 0.001,  # the interval ends at or below +0.1 points
                    "worse": low is not None and low > 0})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="tinylm-py")
    parser.add_argument("--groups", default="32,64,128,256")
    parser.add_argument("--modes", default="none,once")
    parser.add_argument("--check-positions", type=int, default=8192)
    parser.add_argument("--solve-seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    rows = {}
    for group in (int(g) for g in args.groups.split(",")):
        rows.update(measured(args.workload, group, modes, args.solve_seconds, args.check_positions, args.runs))
        print(group, {k: (v["perplexity_rise_pct"], v["ci95_pct"]) for k, v in rows.items() if k.startswith(f"g{group} ")}, flush=True)
    compared = pairs(rows)
    summary = {k: {f: v[f] for f in ("bits_per_weight", "weights_changed", "weights_left", "perplexity_rise_pct", "ci95_pct", "weight_error")} for k, v in rows.items()}
    fields = {
        "conditions": {
            "command": f"agnitra.layout('zoo:{args.workload}', transforms='quant:int4:gG', modes={modes}, device='cpu', solve_seconds={args.solve_seconds}, "
                       f"check_positions={args.check_positions}, runs={args.runs}) for G in {args.groups}, one after another",
            "machine": os.environ.get("AGNITRA_BENCH_MACHINE", "2-core VM"),
            "quality": f"held-out perplexity's relative rise against the original over {args.check_positions} teacher-forced positions (windows of 64 held-out "
                       "tokens), its 95% interval the windows' log-ratios resampled; pairs: the windows' differences resampled (verify.perplexity.paired_change)",
            "bits_per_weight": "over the Linear layers but the LM head: 4 + 32 / G (an fp16 scale and offset a group) where converted, 32 (float32) in "
                               "layers whose inputs G does not divide (left as they were, said in the step's notes)",
            "equal_or_better": "the fewer-bits model's perplexity against the other's: the 95% interval's upper end at or below +0.1 points",
            "baseline": "the original model in the same interleaved run",
            "peer": "none: no peer tool orders channels for int4 groups on the CPU",
            "correctness": "each mode's held-out perplexity, above; the permutations alone are verified function-preserving by the test suite",
        },
        "summary": summary,
        "pairs": compared,
        "runs": rows,
    }
    out = args.out or Path(__file__).parent / "results" / f"layout-int4-groups-paired-cpu-{dt.date.today()}.json"
    write_result(out, "agnitra.bench.layout-groups/4", describe_device("cpu"), **fields)
    for pair in compared:
        print(pair)
    print("wrote", out)


if __name__ == "__main__":
    main()

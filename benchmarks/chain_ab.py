"""A decode step's chain of tuned int4 GEMVs (o, gate, up, down by default) against the same chain with
some keys changed in some of its GEMVs' configurations, head to head: what a kernel change does where
a model runs it, beside the chain of one shape that `ab_config.py` times.

    PYTHONPATH=src python benchmarks/chain_ab.py --variant '{"PDL": false}' --variant '1,2:{"FIXUP": "count"}' --out-file out.json

A --variant is a JSON object merged over every GEMV's tuned configuration, or `POSITIONS:JSON` to merge it
over those chain positions only. Each call of the CUDA graph (20 calls: whole chains) runs the chain's
next GEMV on its own input set, the sets rotated past L2; outputs are checked bitwise against the
tuned chain's.

Measured (H100, bf16, batch 1, settled; chain-int4-*.json): asking L2 for a GEMV's own next step before its
PDL wait (benchmarks/experiments/int4-tc-l2-ahead.patch) gains 1.2-2.4% in a chain of one shape and loses
1.7-5% in this chain, as asking for the next GEMV's first steps did (next_prefetch.py).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from agnitra.kernels.autotune import head_to_head
from agnitra.kernels.spec import get_kernel
from pdl_trigger import settled_gemv_context, tuned_gemv  # benchmarks/
from result_file import fraction_of_copy, write_result  # benchmarks/


def parse_variant(text: str, length: int) -> tuple[set[int], dict]:
    """(chain positions, keys) of a --variant: 'JSON' (every position) or 'POSITIONS:JSON'."""
    if text.lstrip().startswith("{"):
        return set(range(length)), json.loads(text)
    positions, _, keys = text.partition(":")
    return {int(p) for p in positions.split(",")}, json.loads(keys)


def tuned_chain(spec, chain: str, context: tuple, runs: int) -> list[tuple]:
    """(input sets rotated past L2, tuned configuration, bytes) of each GEMV of `chain` ("NxK,NxK,...")."""
    parts = []
    for text in chain.split(","):
        n, k = map(int, text.split("x"))
        shape, sets, best = tuned_gemv(spec, n, k, context, runs, 128)
        parts.append((sets, best, spec.bytes(shape, torch.bfloat16)))
    return parts


def chain_call(spec, parts: list[tuple], configs: list[dict]):
    """call(j): GEMV j % len(parts) of the chain, with its configuration, on its input set j // len(parts) (rotated)."""
    def call(j: int):
        sets = parts[j % len(parts)][0]
        return spec.launch(*sets[(j // len(parts)) % len(sets)], config=configs[j % len(parts)])
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", default="4096x4096,14336x4096,14336x4096,4096x14336", help="N x K of each GEMV, in order")
    parser.add_argument("--variant", action="append", required=True, help="JSON merged over every GEMV's configuration, or POSITIONS:JSON (repeatable)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    context, settled = settled_gemv_context()
    device, report = context[:2]
    spec = get_kernel("int4_gemv")
    parts = tuned_chain(spec, args.chain, context, args.runs)
    tuned = [best for _, best, _ in parts]
    chains = {"tuned": tuned}
    for text in args.variant:
        positions, keys = parse_variant(text, len(parts))
        chains[text] = [{**c, **keys} if i in positions else c for i, c in enumerate(tuned)]
    calls = {label: chain_call(spec, parts, configs) for label, configs in chains.items()}
    reference = [calls["tuned"](j) for j in range(len(parts))]
    bitwise = {label: all(torch.equal(call(j), reference[j]) for j in range(len(parts))) for label, call in calls.items()}
    per_call = dict(zip(calls, head_to_head(list(calls.values()), args.runs, device)))
    chain_bytes = sum(b for _, _, b in parts)
    per_chain = {label: ms * len(parts) for label, ms in per_call.items()}
    row = {"chain": args.chain, "configs": chains, "ms_per_chain": per_chain, "bytes_per_chain": chain_bytes, "bitwise_equal_to_tuned": bitwise,
           "fraction_of_copy": {label: fraction_of_copy(chain_bytes, ms, report.ceilings["copy_gbps"]) for label, ms in per_chain.items()}}
    print("chain", args.chain, {label: round(ms * 1e3, 2) for label, ms in per_chain.items()}, bitwise, flush=True)
    write_result(args.out_file, "agnitra.chain-ab/1", report, runs=args.runs, settled=settled,
                 timing="CUDA graphs of 20 calls (whole chains), each GEMV on its own input sets rotated past L2, 3 interleaved rounds, median", rows=[row])
    return 0


if __name__ == "__main__":
    sys.exit(main())

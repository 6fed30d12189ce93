"""The tuned tensor-core int4 GEMV asking L2 for the next GEMV's first steps (`prefetch=next_prefetch(...)`)
against itself without, head to head, each call of the CUDA graph prefetching for the
call after it (the next input set: rotated past L2, so nothing else is in L2 ahead of time).

    git apply benchmarks/experiments/int4-tc-next-prefetch.patch   # the kernel's NextPrefetch: not in Agnitra
    PYTHONPATH=src python benchmarks/next_prefetch.py --shapes 14336x4096,4096x4096 --steps 1,2,4 --out-file out.json

Measured, not kept (H100, bf16, batch 1, settled): a chain of the same GEMV gains (14336x4096 12.24-12.33
-> 11.94-12.00 us, 4096x14336 12.93 -> 12.26-12.50), 4096x4096 loses (5.49 -> 5.56-5.63), and a decode
step's chain o, gate, up, down loses whatever the volume asked for (44.8 -> 46.2-46.5 us a chain;
next-prefetch-int4-*.json).
"""

from __future__ import annotations

import argparse
import sys

import torch

from agnitra.kernels import quant_matmul as qm
from agnitra.kernels.autotune import head_to_head
from agnitra.kernels.spec import get_kernel
from chain_ab import tuned_chain  # benchmarks/
from pdl_trigger import settled_gemv_context, tuned_gemv  # benchmarks/
from result_file import fraction_of_copy, write_result  # benchmarks/


def chained(sets: list[tuple], config: dict, steps: int):
    """call(j): the GEMV on input set j, prefetching set j + 1's first `steps` steps (0: none)."""
    words = [qm._int4_tc_words(s[1]) for s in sets]

    ahead = [qm.next_prefetch(w, config, steps) if steps else None for w in words]

    def call(j: int):
        x, packed, scales, zeros, g, bias = sets[j % len(sets)]
        return qm.int4_weight_only_matmul(x, packed, scales, zeros, g, bias, config={**config, "path": "gemv"}, prefetch=ahead[(j + 1) % len(sets)])
    return call


def chain_calls(parts: list[tuple], steps: int, budget: float | None = None, askers: set[int] | None = None):
    """call(j): GEMV j of a chain cycling through `parts` ((sets, config, bytes) per shape), on its input set
    j // len(parts), asking L2 for the next GEMV's first `steps` steps (0: none), at most `budget` x its own bytes."""
    words = [[qm._int4_tc_words(s[1]) for s in sets] for sets, _, _ in parts]

    def ask(i: int, w):  # what GEMV i - 1 of the chain asks for ahead of GEMV i (`askers`: only those positions ask)
        asker = (i - 1) % len(parts)
        if not steps or (askers is not None and asker not in askers):
            return None
        return qm.next_prefetch(w, parts[i][1], steps, None if budget is None else int(budget * parts[asker][2]))

    ahead = [[ask(i, w) for w in shape_words] for i, shape_words in enumerate(words)]

    def call(j: int):
        i, r = j % len(parts), j // len(parts)
        sets, config, _ = parts[i]
        x, packed, scales, zeros, g, bias = sets[r % len(sets)]
        nxt = (j + 1) % len(parts)
        return qm.int4_weight_only_matmul(x, packed, scales, zeros, g, bias, config={**config, "path": "gemv"},
                                          prefetch=ahead[nxt][((j + 1) // len(parts)) % len(parts[nxt][0])])
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="14336x4096,4096x4096,4096x14336")
    parser.add_argument("--steps", default="1,2,4")
    parser.add_argument("--chain", help="also time this chain of shapes (NxK,NxK,...: a decode step's projections in order), each GEMV asking for the next's first step")
    parser.add_argument("--budgets", help="with --chain: also each GEMV asking for at most this fraction of its own bytes (comma-separated)")
    parser.add_argument("--askers", help="with --chain: also only these chain positions asking (comma-separated groups, + within one: 0,1,1+2)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    context, settled = settled_gemv_context()
    device, report = context[:2]
    spec = get_kernel("int4_gemv")
    rows = []

    def save() -> None:
        write_result(args.out_file, "agnitra.next-prefetch/1", report, runs=args.runs, settled=settled,
                     timing="CUDA graphs of 20 calls, call j on input set j prefetching set j + 1, sets rotated past L2, 3 interleaved rounds, median", rows=rows)

    for text in args.shapes.split(","):
        n, k = map(int, text.split("x"))
        shape, sets, best = tuned_gemv(spec, n, k, context, args.runs, 128)
        if best.get("KERNEL") != "tc":
            rows.append({"shape": list(shape), "config": best, "skipped": "not the tensor-core kernel"})
            continue
        variants = {0: chained(sets, best, 0), **{s: chained(sets, best, s) for s in map(int, args.steps.split(","))}}
        same = {s: bool(torch.equal(call(0), variants[0](0))) for s, call in variants.items()}
        times = dict(zip(variants, head_to_head(list(variants.values()), args.runs, device)))
        rows.append({"shape": list(shape), "config": best, "ms": {f"next_steps_{s}": ms for s, ms in times.items()}, "bitwise_equal_to_none": same})
        print(shape, {s: round(ms * 1e3, 2) for s, ms in times.items()}, same, flush=True)
        save()
    if args.chain:
        parts = tuned_chain(spec, args.chain, context, args.runs)
        for text, (_, best, _) in zip(args.chain.split(","), parts):
            if best.get("KERNEL") != "tc":
                raise SystemExit(f"{text}: tuned to {best.get('KERNEL')}, not the tensor-core kernel")
        bytes_ = sum(b for _, _, b in parts)
        # graphs of a whole number of chains (the harness captures 20 calls: 20 // len * len of them would split the chain; time per call instead)
        budgets = [float(b) for b in args.budgets.split(",")] if args.budgets else []
        askers = [{int(p) for p in group.split("+")} for group in args.askers.split(",")] if args.askers else []
        labels = ["none", "next_steps_1", *(f"next_steps_1_budget_{b}" for b in budgets), *("next_steps_1_from_" + "+".join(map(str, sorted(a))) for a in askers)]
        calls = [chain_calls(parts, 0), chain_calls(parts, 1), *(chain_calls(parts, 1, b) for b in budgets), *(chain_calls(parts, 1, askers=a) for a in askers)]
        times = head_to_head(calls, args.runs, device)
        per_chain = [ms * len(parts) for ms in times]
        rows.append({"chain": args.chain, "configs": [c for _, c, _ in parts], "ms_per_call": dict(zip(labels, times)),
                     "ms_per_chain": dict(zip(labels, per_chain)), "bytes_per_chain": bytes_,
                     "fraction_of_copy": {label: fraction_of_copy(bytes_, ms, report.ceilings["copy_gbps"]) for label, ms in zip(labels, per_chain)}})
        print("chain", args.chain, dict(zip(labels, [round(ms * 1e3, 2) for ms in per_chain])), flush=True)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why the one-round-trip 'wait' split-K fix-up (fixup_cost.py) hangs: the same fix-up with its spin
bounded, launched back to back, the give-ups counted.

    PYTHONPATH=src python benchmarks/fixup_wait_debug.py --out-file wait-debug.json

`_fixup_wait_bounded` is `fixup_cost._fixup_wait` (Agnitra's FIXUP "wait") whose waiting program gives up after MAX_ROUNDS
rounds of reads: it then counts the give-up on its block's counter and leaves the partial slots as
they are (a sibling that stores late leaves a slot off the sentinel after the launch; one that never
stores leaves it at the sentinel). Each config runs batches of eager launches back to back (PDL on
and off), then the timing harness's path (warm-up launches, a CUDA graph of 20, replays), and after
each: the give-ups, the slots left off the sentinel, and whether every output equals the counter
fix-up's. Writes one JSON file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import fixup_cost as fc  # benchmarks/
from agnitra import api
from agnitra.device import resolve_device
from agnitra.kernels._triton import tl
from agnitra.kernels import quant_matmul as qm
from agnitra.kernels.autotune import input_sets
from agnitra.kernels.quant_matmul import _empty_slots, _read_slots  # the waiting fix-up's rounds (jitted alongside the variant)
from agnitra.kernels.spec import get_kernel
from agnitra.telemetry.timing import time_device_calls
from result_file import write_result  # benchmarks/

MAX_ROUNDS = tl.constexpr(1 << 15)


def _fixup_wait_bounded(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """`fixup_cost._fixup_wait` giving up after MAX_ROUNDS rounds (counted on `counter_ptr`, the slots left as they are)."""
    last = pid_k == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        waiting = tl.full([], 1, tl.int32)
        rounds = tl.full([], 0, tl.int32)
        while (waiting > 0) & (rounds < MAX_ROUNDS):
            total, waiting = _read_slots(p_ptrs, split_stride, mask, acc, SPLIT_K)
            rounds += 1
        tl.debug_barrier()  # before the branch: the warps may not agree on giving up
        if waiting > 0:
            tl.atomic_add(counter_ptr, 1)
        else:
            _empty_slots(p_ptrs, split_stride, mask, acc, SPLIT_K)
        total += acc
    else:
        tl.store(p_ptrs + pid_k * split_stride, acc, mask=mask)
    return total, last


_GAVE_UP: dict = {}


def _bounded_buffers(split_k, m, n, blocks, y):
    """`fixup_cost._wait_buffers`'s slots, and a give-up counter a block (kept, zeroed by the caller)."""
    partials, _ = fc._wait_buffers(split_k, m, n, blocks, y)
    key = (y.device, blocks)
    if key not in _GAVE_UP:
        _GAVE_UP[key] = torch.zeros(blocks, dtype=torch.int32, device=y.device)
    return partials, _GAVE_UP[key]


fc.VARIANTS["wait_bounded"] = _fixup_wait_bounded
fc.VARIANT_BUFFERS["wait_bounded"] = _bounded_buffers


def _state(device) -> dict:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    gave_up = sum(int((c != 0).sum()) for c in _GAVE_UP.values())
    off = sum(int((p.view(torch.int32) != qm.SLOT_EMPTY).sum()) for slots in qm._SLOTS.values() for p in slots)
    return {"blocks_gave_up": gave_up, "slots_off_sentinel": off}


def _reset() -> None:
    for c in _GAVE_UP.values():
        c.zero_()
    for slots in qm._SLOTS.values():
        for p in slots:
            p.view(torch.int32).fill_(qm.SLOT_EMPTY)


def probe(spec, config: dict, sets, device, batches: int, launches: int, variant: str = "wait_bounded") -> dict:
    """Back-to-back eager launches of `config` with a wait fix-up (`variant`: bounded or not), and the timing harness's path."""
    count = fc.compiled_launch(spec, config, sets, "count")
    expected = [count(j).clone() for j in range(len(sets))]
    wait = fc.compiled_launch(spec, config, sets, variant)
    _reset()
    out = {"first_equal": bool(torch.equal(wait.first, expected[0])), "batches": []}
    for _ in range(batches):
        t0 = time.perf_counter()
        ys = [wait(j) for j in range(launches)]
        state = _state(device)
        state["wall_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        state["wrong_outputs"] = sum(not torch.equal(y, expected[j % len(sets)]) for j, y in enumerate(ys))
        out["batches"].append(state)
        _reset()
    t0 = time.perf_counter()
    ms = time_device_calls(wait, 10, device)
    out["harness"] = {**_state(device), "wall_ms": round((time.perf_counter() - t0) * 1e3, 2), "us": round(1e3 * sorted(ms)[len(ms) // 2], 3)}
    _reset()
    print(spec.name, config, json.dumps(out), flush=True)
    return out


CONFIGS = {
    "int8_gemv": [{"BLOCK_N": 4, "BLOCK_K": 512, "num_warps": 4, "num_stages": 1, "STAGES": 3, "SPLIT_K": 2},
                  {"BLOCK_N": 8, "BLOCK_K": 512, "num_warps": 4, "num_stages": 1, "STAGES": 3, "SPLIT_K": 2},
                  {"BLOCK_N": 16, "BLOCK_K": 512, "num_warps": 4, "num_stages": 1, "STAGES": 3, "SPLIT_K": 2}],
    "int4_gemv": [{"KERNEL": "tc", "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8, "num_stages": 1, "PREFETCH": True, "maxnreg": 128, "SPLIT_K": 8}],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--launches", type=int, default=40)
    parser.add_argument("--shape", default="4096x4096", help="N x K at batch 1")
    parser.add_argument("--variant", choices=("wait_bounded", "wait"), default="wait_bounded", help="wait: the unbounded spin (a hang is a timeout)")
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    device = resolve_device(args.device)
    report = api.describe_device(device)
    l2 = report.signature.get("l2_bytes")
    rows = []
    path = Path(args.out_file)
    n, k = map(int, args.shape.split("x"))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16  # the interpreter's bf16 tl.dot is wrong
    for name, configs in CONFIGS.items():
        spec = get_kernel(name)
        shape = (1, n, k, fc.GROUP) if name == "int4_gemv" else (1, n, k)
        sets = input_sets(spec, shape, dtype, device, l2)
        for config in configs:
            for pdl in (False, True):
                cfg = {**config, "PDL": pdl}
                try:
                    result = probe(spec, cfg, sets, device, args.batches, args.launches, args.variant)
                except Exception as exc:  # noqa: BLE001 - recorded
                    result = {"error": str(exc).splitlines()[0][:300]}
                rows.append({"kernel": name, "shape": list(shape), "config": cfg, **result})
                write_result(path, "agnitra.fixup-wait-debug/1", report, variant=args.variant, max_rounds=MAX_ROUNDS.value, rows=rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

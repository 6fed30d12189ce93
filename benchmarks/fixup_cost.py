"""What the split-K fix-up costs the decode GEMVs: each split config timed with its fix-up as it is,
with a cheaper one, and with none, head to head.

    PYTHONPATH=src python benchmarks/fixup_cost.py --shapes 4096x4096,14336x4096 --out-file fixup.json

The GEMVs that split K sum their programs' partials in the kernel (`quant_matmul._split_k_total`):
each program stores its fp32 partial, counts its arrival on an atomic counter (after a CTA barrier,
with release/acquire ordering), and the last to arrive loads the SPLIT_K partials and stores the
output: three memory round trips after the main loop for the last program of every block. Variants,
swapped in for `_split_k_total` before the kernels compile (none is used by Agnitra):
- `count`: the fix-up as it is (the counter reset by a relaxed exchange; in the committed run's file
  `count` is the fix-up before that, whose acq_rel reset put a fence and the exchange's reply before
  the output's store, a fourth round trip, and `count_relaxed` is today's);
- `flags`: each program stores its partial, fences (fence.sc.gpu: of any two programs at least one
  sees the other's partial) and loads every split's partial; all write the output here. A partial
  still unwritten would read as a sentinel in the real thing, so the program that sees none is a last
  one: two round trips and no CTA barrier or atomic;
- `wait` (not in the default list): the block's program SPLIT_K - 1 waits for its siblings' partials,
  read until none is a sentinel NaN, then (after a CTA barrier) writes the sentinel back; the others
  store and finish: one round trip. Without that barrier it hung the GPU (log-fixup-wait-*.txt,
  log-fixup-wait-no-barrier-*.txt): where the sentinel count is whole in every warp (a replicated
  layout, int8 at 8 rows a block), each warp left the spin on its own and the first to leave reset
  the slots while another still polled them. With it, bitwise equal to `count` and 0.1-2.5 us faster
  at most split configs, slower at some (fixup-cost-wait-*.json); not in Agnitra: its progress rests
  on the GPU starting a grid's programs in order (the waiter after its siblings), which CUDA does not
  promise;
- `arrive`: each program counts its arrival first (a relaxed atomic, no fence); the last to arrive
  reads its siblings' slots until none is the sentinel (they have arrived, so they run and store:
  no dependence on dispatch order), the others store after their count. Bitwise `count`, but slower
  on every tuned winner on the H100 (fixup-cost-arrive-*.json);
- `publish`: `arrive` with the partial stored before the count: 12.64 -> 12.37 us on 14336x4096's
  one-warp winner, far slower on multi-warp configs (fixup-cost-publish-*.json);
- NAME_coop: fix-up NAME with the grid launched cooperatively (all programs resident, or the launch
  fails), which makes `wait` safe: that is Agnitra's FIXUP "wait" (`quant_matmul._split_k_total_waiting`;
  fixup-cost-coop-*.json: 12.67 -> 12.01 us on that winner);
- `none`: no fix-up, each program stores its own partial as the output (wrong sums): the bound.
Configs: the tuned winners' shapes (`FAMILIES`) at every split their space allows, timed in a chain
of 20 under PDL over copies past L2 (`autotune.head_to_head`).
Writes one JSON file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

from agnitra import api
from agnitra.device import resolve_device
from agnitra.kernels import quant_matmul as qm
from agnitra.kernels._triton import tl, triton
from agnitra.kernels.autotune import head_to_head, input_sets
from agnitra.kernels.quant_matmul import _split_k_total_waiting  # noqa: F401 - called by _fixup_wait (jitted alongside it)
from agnitra.kernels.spec import get_kernel
from result_file import write_result  # benchmarks/
from steady import settle  # benchmarks/

GROUP = 128
COUNT = qm._split_k_total
BUFFERS = qm._split_k_buffers


def _fixup_flags(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """Store, fence, load every split's partial (see the module's docstring); every program writes."""
    tl.store(p_ptrs + pid_k * split_stride, acc, mask=mask)
    fenced = tl.inline_asm_elementwise("fence.sc.gpu;\nmov.b32 $0, $1;", "=r,r", [pid_k], dtype=tl.int32, is_pure=False, pack=1)
    total = tl.zeros_like(acc)
    for split in tl.static_range(SPLIT_K):
        total += tl.load(p_ptrs + split * split_stride + (fenced - pid_k), mask=mask, other=0.0, cache_modifier=".cg")
    return total, True


SENTINEL = qm.SLOT_EMPTY  # a NaN no arithmetic makes: "not written yet" (the slots of `qm.reserve_split_k_slots`)
_SENTINEL = qm._SLOT_EMPTY


def _fixup_wait(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """Agnitra's FIXUP "wait" (`quant_matmul._split_k_total_waiting`: the block's program SPLIT_K - 1
    reads its siblings' slots until none is the sentinel), here in a grid launched as any other: its
    progress then rests on the GPU starting the waiting program after its siblings."""
    return _split_k_total_waiting(acc, p_ptrs, split_stride, mask, pid_k, SPLIT_K)


def _wait_buffers(split_k, m, n, blocks, y):
    """`_split_k_buffers` for `_fixup_wait`: the slots Agnitra's waiting fix-up reads (marked empty between launches)."""
    if split_k == 1:
        return y, y
    return qm.reserve_split_k_slots(y.device, split_k * m * n), y


@triton.jit
def read_siblings(p_ptrs, split_stride, mask, acc, pid_k, SPLIT_K: tl.constexpr):
    """One round of the arrive fix-up's reads: the sum in split order of the block's partials (this
    program's own, `acc`, at its split; its siblings' loaded) and how many sibling slots still read
    as the sentinel (a count whole in each warp, not always block-wide)."""
    total = tl.zeros_like(acc)
    unset = tl.zeros(acc.shape, tl.int32)
    for split in tl.static_range(SPLIT_K):  # every sibling's loads issued at once
        sibling = mask & (tl.full(mask.shape, split, tl.int32) != pid_k)  # (mask & scalar fails in the interpreter)
        v = tl.load(p_ptrs + split * split_stride, mask=sibling, other=0.0, volatile=True)
        unset += (sibling & (v.to(tl.int32, bitcast=True) == _SENTINEL)).to(tl.int32)
        total += tl.where(pid_k == split, acc, v)
    return total, tl.sum(unset)


@triton.jit
def store_partial(p_ptrs, split_stride, mask, acc, pid_k):
    """This program's partial in its slot (a NaN equal to the sentinel stored as the canonical NaN)."""
    bits = acc.to(tl.int32, bitcast=True)
    tl.store(p_ptrs + pid_k * split_stride, tl.where(bits == _SENTINEL, 0x7FC00000, bits).to(tl.float32, bitcast=True), mask=mask)


@triton.jit
def gather_arrived(p_ptrs, split_stride, mask, acc, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """The block's last arrival (`arrive`, `publish`): its siblings' slots read until none is the
    sentinel, summed in split order with its own partial (bitwise `count`'s sum); after a CTA barrier
    every slot back to the sentinel and the counter to zero, for the next launch."""
    total = tl.zeros_like(acc)
    waiting = tl.full([], 1, tl.int32)
    while waiting > 0:
        total, waiting = read_siblings(p_ptrs, split_stride, mask, acc, pid_k, SPLIT_K)
    tl.debug_barrier()  # every warp past the spin before any slot is reset
    sentinel = tl.full(acc.shape, _SENTINEL, tl.int32).to(tl.float32, bitcast=True)
    for split in tl.static_range(SPLIT_K):
        tl.store(p_ptrs + split * split_stride, sentinel, mask=mask)
    tl.atomic_xchg(counter_ptr, 0, sem="relaxed")
    return total


def _fixup_arrive(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """Arrive first, publish after: each program counts its arrival (a relaxed atomic: nothing of its
    own is published yet, so no fence or barrier before it). The block's last to arrive reads its
    siblings' slots until none reads as the sentinel (they have all arrived, so they are running and
    store without waiting on anything: no dependence on the order the GPU starts programs in, unlike
    `wait`) and sums them with its own (`gather_arrived`); the others store their partial and are
    done. The last's path: the atomic's round trip and one round of reads (two with `count`'s fence,
    atomic and reads)."""
    arrived = tl.atomic_add(counter_ptr, 1, sem="relaxed")
    last = arrived == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        total = gather_arrived(p_ptrs, split_stride, mask, acc, counter_ptr, pid_k, SPLIT_K)
    else:
        store_partial(p_ptrs, split_stride, mask, acc, pid_k)
    return total, last


def _fixup_publish(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """`arrive` with each program's partial stored before its arrival is counted (no CTA barrier or
    fence between: the last to arrive reads until no sibling slot reads as the sentinel, so what
    orders the store before the count is not needed for a right sum, only for a first read that
    finds every partial there)."""
    store_partial(p_ptrs, split_stride, mask, acc, pid_k)
    arrived = tl.atomic_add(counter_ptr, 1, sem="relaxed")
    last = arrived == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        total = gather_arrived(p_ptrs, split_stride, mask, acc, counter_ptr, pid_k, SPLIT_K)
    return total, last


def _arrive_buffers(split_k, m, n, blocks, y):
    """`_split_k_buffers` for `_fixup_arrive`: the sentinel slots (as `wait`'s) and the counters."""
    if split_k == 1:
        return y, y
    return _wait_buffers(split_k, m, n, blocks, y)[0], qm.reserve_split_k_counters(y.device, blocks)


def _fixup_none(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """No fix-up: every program's partial is its output (a lower bound on time, not a sum)."""
    return acc, True


VARIANTS = {"count": COUNT, "wait": _fixup_wait, "flags": _fixup_flags, "arrive": _fixup_arrive, "publish": _fixup_publish, "none": _fixup_none}
VARIANT_BUFFERS = {"wait": _wait_buffers, "arrive": _arrive_buffers, "publish": _arrive_buffers}  # a variant's partials and counters, where not `_split_k_buffers`'s


PDL_OPTIONS = qm.pdl_options


def _cooperative_options(x, cfg):
    """`pdl_options` plus a cooperative launch (every program of the grid resident at once, or the launch fails)."""
    return {**PDL_OPTIONS(x, cfg), "launch_cooperative_grid": True}


@contextlib.contextmanager
def _variant(variant: str, jitted: dict | None = None):
    """quant_matmul with fix-up `variant` (its helper and buffers, and the kernels `jitted` with it when
    given: the interpreter looks the helper up at run time, the compiler binds it once), restored after.
    A variant named NAME_coop is fix-up NAME with the grid launched cooperatively."""
    saved = dict(qm._JITTED)
    base = variant.removesuffix("_coop")
    qm._split_k_total, qm._split_k_buffers = VARIANTS[base], VARIANT_BUFFERS.get(base, BUFFERS)
    if variant != base:
        qm.pdl_options = _cooperative_options
    qm._JITTED.clear()
    qm._JITTED.update(jitted or {})
    try:
        yield
    finally:
        qm._split_k_total, qm._split_k_buffers, qm.pdl_options = COUNT, BUFFERS, PDL_OPTIONS
        qm._JITTED.clear()
        qm._JITTED.update(saved)


def compiled_launch(spec, config: dict, sets, variant: str):
    """A launch of `config` whose kernels use fix-up `variant`, compiled now (its first output kept as
    `.first`), each call run with them swapped in, so the variants can be timed head to head."""
    with _variant(variant):
        first = spec.launch(*sets[0], config=config).clone()  # compiles
        jitted = dict(qm._JITTED)

    def launch(j):
        with _variant(variant, jitted):
            return spec.launch(*sets[j % len(sets)], config=config)

    launch.first = first
    return launch


# the config families timed at every split the space allows: the tuned winners' shapes (int8: 8 rows x
# 1 KB steps at 4096x4096, kernels-gemv-int8-early-3d-tpe-fixed-8b-*.json; int4 tc: 128 rows on 8 warps,
# steps of 128 features capped at 128 registers or 256 with X_NOW, and 64 rows on 4 warps)
FAMILIES = {
    "int8_gemv": [{"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4, "num_stages": 1, "STAGES": 3}
                  for bn, bk in ((4, 512), (4, 1024), (8, 512), (8, 1024), (16, 256), (16, 512))],
    "int4_gemv": [{"KERNEL": "tc", "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8, "num_stages": 1, "PREFETCH": True, "maxnreg": 128},
                  {"KERNEL": "tc", "BLOCK_N": 128, "BLOCK_K": 256, "num_warps": 8, "num_stages": 1, "PREFETCH": True, "maxnreg": 128, "X_NOW": True},
                  {"KERNEL": "tc", "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 1, "PREFETCH": True, "maxnreg": 128}],
}


def split_configs(name: str, shape, dtype) -> list[dict]:
    """Each family (`FAMILIES`) at every SPLIT_K its kernel's space allows at `shape` (int4), or up to 8
    with two steps a split at least (int8: its space keeps ~8 programs an SM at most; the read-only
    floor's best at 16.8 MB ran 31, overlap-floor-*.json)."""
    bare = lambda c: json.dumps({k: v for k, v in c.items() if k not in ("maxnreg", "X_NOW", "SPLIT_K")}, sort_keys=True) + f"/{c['SPLIT_K']}"  # noqa: E731
    in_space = {bare(c) for c in get_kernel(name).configs(shape, dtype)}
    out = []
    for family in FAMILIES[name]:
        for split in (1, 2, 4, 8, 16):
            config = {**family, "SPLIT_K": split}
            if name == "int8_gemv" and shape[2] // family["BLOCK_K"] >= 2 * split or bare(config) in in_space:
                out.append(config)
    return out


def measure(name: str, shape, configs: list[dict], dtype, device, l2, runs: int, split_variants: tuple[str, ...]) -> list[dict]:
    spec = get_kernel(name)
    sets = input_sets(spec, shape, dtype, device, l2)
    rows = []
    for config in configs:
        variants = split_variants if config["SPLIT_K"] > 1 else ("count",)
        calls, errors = {}, {}
        for v in variants:  # a variant that cannot run here (a cooperative grid too large to be resident at once): recorded
            try:
                calls[v] = compiled_launch(spec, config, sets, v)
            except Exception as exc:  # noqa: BLE001
                errors[v] = str(exc).splitlines()[0][:200]
        if "count" not in calls:
            rows.append({"config": config, "error": errors.get("count", "count not timed")})
            continue
        # the fix-ups that sum in the counter's order: bitwise equal, on the first launch and after the timed ones
        same = {v: bool(torch.equal(c.first, calls["count"].first)) for v, c in calls.items() if v.removesuffix("_coop") in ("count", "wait", "arrive", "publish") and v != "count"}
        times = head_to_head(list(calls.values()), runs, device)
        same_after = {v: bool(torch.equal(calls[v](0), calls["count"](0))) for v in same}
        rows.append({"config": config, **{f"{v}_us": round(t * 1000, 3) for v, t in zip(calls, times)}, "same_as_count": same, "same_after_timing": same_after,
                     **({"errors": errors} if errors else {})})
        print(name, shape, config, rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default="4096x4096,14336x4096,4096x14336", help="NxK at batch 1, comma-separated")
    parser.add_argument("--kernels", default="int8_gemv,int4_gemv", help="KERNEL@NxK,... to limit a kernel to some shapes, e.g. int8_gemv@4096x4096,int4_gemv")
    parser.add_argument("--variants", default="count,flags,none", help="the fix-ups timed on split configs (the interpreter runs no PTX: count,none; also: wait)")
    parser.add_argument("--configs", help="a JSON list of configs (SPLIT_K included) timed at every shape instead of the families at every split")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    device = resolve_device(args.device)
    report = api.describe_device(device)
    settled = settle(device)
    l2 = report.signature.get("l2_bytes")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16  # the interpreter's bf16 tl.dot is wrong
    rows = []
    path = Path(args.out_file)
    for key in args.shapes.split(","):
        n, k = map(int, key.split("x"))
        for name in args.kernels.split(","):
            name, _, only = name.partition("@")
            if only and only != key:
                continue
            shape = (1, n, k, GROUP) if name == "int4_gemv" else (1, n, k)
            configs = json.loads(args.configs) if args.configs else split_configs(name, shape, dtype)
            rows.append({"kernel": name, "shape": list(shape), "configs": measure(name, shape, configs, dtype, device, l2, args.runs, tuple(args.variants.split(",")))})
            write_result(path, "agnitra.fixup-cost/1", report, runs=args.runs, settled=settled,
                         timing="CUDA graphs of 20 calls under PDL, copies past L2, variants head to head, median", rows=rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

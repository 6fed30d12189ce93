"""Kernel benchmark: Agnitra's Triton kernels against cuBLAS and torch.compile, in one run.

    PYTHONPATH=src python benchmarks/kernels.py            # on the GPU machine
    PYTHONPATH=src python benchmarks/kernels.py --quick    # fewer shapes
    PYTHONPATH=src python benchmarks/kernels.py --only gemv --refine   # cached tunings re-judged against their refinements first

For each kernel and shape: the autotuned configuration (tuning cached per device), its median
time over rotating input sets larger than L2, achieved GB/s counting the bytes it must read and
write, the fraction of the measured copy bandwidth (or TFLOP/s against the measured matmul peak),
the default configuration's time, and the peers measured in the same process (each GEMV row
also beside a read-only pass over its weight bytes, `read_floor`; everything timed after a second
of memory traffic, `settle`):
- weight-only int8/int4 GEMV: torch bf16 F.linear (cuBLAS) and torch.compile of the int8 path a
  user would write (F.linear(x, w_int8.to(bf16)) * scales), with coordinate-descent tuning
  (--peer-compiles N: compiled N times afresh, its best kept), no bias on either side (llama's
  projections have none). On Hopper ours launch with programmatic dependent launch, so the row
  also times ours without it (ms_without_pdl) and adds torch.compile's int8 with Inductor's PDL
  (torch_compile_int8_pdl) as a peer; both are timed in CUDA graphs of 20 calls of themselves,
  the case most favourable to PDL (`pdl_trigger.py --mixed`, at the tag lab-2026-11-26, timed it
  between torch kernels);
- fused norms: eager and torch.compile of the same PyTorch code;
- matmul: torch.matmul (cuBLAS).
Writes benchmarks/results/kernels-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from agnitra import api
from agnitra.config import load_settings
from agnitra.device import resolve_device
from agnitra.kernels.autotune import check, head_to_head, input_sets, refine, sets_past_l2, to_float64, tune
from agnitra.kernels.pdl import PDL_TRIGGERS, pdl_supported, pdl_wait
from agnitra.kernels.spec import get_kernel
from agnitra.kernels.tuning_cache import TuningCache
from agnitra.telemetry.timing import time_device_calls
from agnitra.transforms.compile import inductor_pdl_unavailable
from result_file import fraction_of_copy, write_result  # benchmarks/

LLAMA_8B = [(1, 4096, 4096), (1, 14336, 4096), (1, 4096, 14336), (1, 128256, 4096)]  # (M, N, K): x[M,K] @ W[N,K]^T
LLAMA_1B = [(1, 2048, 2048), (1, 256, 2048), (1, 5632, 2048), (1, 2048, 5632), (1, 32000, 2048)]
# the fused decode-step kernels: (kernel, shape); GEMV shape = (M, outputs or pairs, K),
# attention = (M, heads, head dim, kv heads, cache slots)
DECODE = {
    "1b": [("decode_gemv", (1, 1280, 2048)), ("decode_gemv", (1, 2048, 2048)), ("decode_gemv_gated", (1, 5632, 2048)),
           ("decode_gemv", (1, 2048, 5632)), ("decode_gemv", (1, 32000, 2048)), ("decode_attention", (1, 32, 64, 4, 160)),
           ("decode_attention", (1, 32, 64, 4, 544))],
    "8b": [("decode_gemv", (1, 3072, 4096)), ("decode_gemv", (1, 4096, 4096)), ("decode_gemv", (1, 14336, 4096)), ("decode_gemv_gated", (1, 14336, 4096)),
           ("decode_gemv", (1, 4096, 14336)), ("decode_gemv", (1, 128256, 4096)), ("decode_attention", (1, 32, 128, 8, 160))],
}
# bert-base at batch 1, seq 128 (fp16): the FFN's first Linear with its GELU, (M, N, K)
ENCODER = [("matmul_bias_gelu", (128, 3072, 768))]
GROUPS = ("matmul", "norms", "gemv", "decode", "encoder")


torch._dynamo.config.recompile_limit = 64  # the compiled int8 peer meets every shape
SETTLE_BYTES = 1024**3


def settle(device: torch.device, seconds: float = 1.0) -> dict | None:
    """Stream SETTLE_BYTES through the GPU (read and written in place) for `seconds`; what was done,
    for the result file (None off a GPU). A GPU that has done no heavy memory traffic yet times
    kernels faster than a model's decode runs them, and stays in the slower state once it has, so
    the kernels are timed there (docs/lab.md, steady.py)."""
    if device.type != "cuda":
        return None
    buffer = torch.ones(SETTLE_BYTES // 4, device=device)
    start, passes = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            buffer.mul_(1.0)
        torch.cuda.synchronize(device)
        passes += 20
    del buffer
    return {"bytes": SETTLE_BYTES, "passes": passes, "seconds": round(time.perf_counter() - start, 2),
            "why": "kernels timed after sustained memory traffic, as a model runs them (benchmarks/kernels.py, settle)"}


def peer_calls(peers: dict, sets) -> tuple[dict, dict]:
    """({name: call(i)} of the peers that ran (warmed up, compiled), {name: "failed: ..."} of those that did not)."""
    calls, failed = {}, {}
    for peer_name, (make_inputs, fn) in peers.items():
        try:
            peer_sets = [make_inputs(s) for s in sets]
            for i in range(3):
                fn(*peer_sets[i % len(peer_sets)])
            calls[peer_name] = lambda i, fn=fn, peer_sets=peer_sets: fn(*peer_sets[i % len(peer_sets)])
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is recorded, not fatal
            failed[peer_name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return calls, failed


def _peer_int8(x, w, scales, *rest):
    return F.linear(x, w.to(x.dtype)) * scales


_COMPILED_INT8: dict[bool, object] = {}


def _peer_int8_pdl(*inputs):  # the same path under its own code object: its own Dynamo cache entry
    return _peer_int8(*inputs)


def compile_int8_peer(pdl: bool = False):
    """What a user's compiled int8 decode gets: Inductor's fused dequant with coordinate-descent
    tuning (gpt-fast's setting; max-autotune takes minutes per shape for the same kernels).
    pdl: with Inductor's programmatic dependent launch turned on (`triton.enable_pdl`), the peer of
    our kernels launched so."""
    if pdl:
        return torch.compile(_peer_int8_pdl, dynamic=False, options={"coordinate_descent_tuning": True, "triton.enable_pdl": True})
    return torch.compile(_peer_int8, dynamic=False, options={"coordinate_descent_tuning": True})


def fresh_int8_peer(pdl: bool = False) -> tuple:
    """(`compile_int8_peer(pdl)`, its Inductor cache dir) compiled from scratch: Dynamo reset and a new,
    empty Inductor cache, so its coordinate descent runs again (and the dir holds only its kernels)."""
    cache = tempfile.mkdtemp(prefix="inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # read when Inductor writes
    torch._dynamo.reset()
    return compile_int8_peer(pdl), Path(cache)


def compiled_int8_peer(pdl: bool = False):
    if pdl not in _COMPILED_INT8:
        _COMPILED_INT8[pdl] = compile_int8_peer(pdl)
    return _COMPILED_INT8[pdl]


def bench_kernel(name: str, shape, dtype, device, cache, l2, ceilings, runs: int, peers: dict, max_trials: int, peer_compiles: int = 1, retune: bool = False,
                 refine_cached: bool = False) -> dict:
    spec = get_kernel(name)
    sets = input_sets(spec, shape, dtype, device, l2)
    refined = refine(spec, shape, dtype, device, cache=cache, runs=runs, l2_bytes=l2, sets=sets) if refine_cached and cache is not None and not retune else None
    result = tune(spec, shape, dtype, device, runs=runs, cache=cache, l2_bytes=l2, force=retune, max_trials=max_trials, sets=sets)
    # the chosen configuration timed (and checked) in this run, beside its peers; a cached tuning's time is from another process
    timed = check(spec, result.best, sets, spec.reference(*to_float64(sets[0])), dtype)
    if not timed.ok:
        raise RuntimeError(f"the tuned configuration {result.best} failed: {timed.reason}")
    # the tuned and the default configuration and the peers head to head in this run (interleaved rounds)
    calls, failed = peer_calls(peers, sets)
    # where our GEMVs launch with PDL (Hopper), the tuned configuration without it as well
    variants = (result.best, result.default) + (({**result.best, "PDL": False},) if name in ("int8_gemv", "int4_gemv") and pdl_supported(device) else ())
    ours = [lambda j, c=c: spec.launch(*sets[j % len(sets)], config=c) for c in variants]
    ms, default_ms, *rest = head_to_head(ours + list(calls.values()), runs, device)
    without_pdl, peer_ms = (rest[0], rest[1:]) if len(variants) == 3 else (None, rest)
    nbytes, flops = spec.bytes(shape, dtype), spec.flops(shape)
    row = {
        "kernel": name, "shape": list(shape), "dtype": str(dtype).replace("torch.", ""),
        "config": result.best, "ms": ms, "tuning_ms": result.best_ms, "default_ms": default_ms, "tuning_default_ms": result.default_ms,
        "default_config": result.default, "relative_error": timed.error,
        "pdl": len(variants) == 3, "ms_without_pdl": without_pdl,
        "gbps": nbytes / (ms / 1e3) / 1e9, "tflops": flops / (ms / 1e3) / 1e12,
        "bandwidth_fraction": fraction_of_copy(nbytes, ms, ceilings["copy_gbps"]),
        "tuned_from_cache": result.cached, "strategy": result.strategy, "trials": len(result.trials), "input_sets": len(sets),
        "peers": {**dict(zip(calls, peer_ms)), **failed}, "timing": "tuned, default and peers head to head: 3 interleaved rounds",
    }
    if refined is not None:  # the cached choice against its refinements, head to head, before this row was timed
        row["refined"] = {"head_to_head": [{"config": c, "ms": ms} for c, ms in refined.head_to_head],
                          "failed": [{"config": t.config, "reason": t.reason} for t in refined.trials if not t.ok]}
    if "torch_compile_int8" in calls:
        add_recompiled_peers(row, ours[0], sets, runs, device, peer_compiles)
    best_peer = min((v for v in row["peers"].values() if isinstance(v, float)), default=None)
    row["speedup_vs_best_peer"] = best_peer / ms if best_peer else None
    print(f"{name:22s} {str(shape):22s} {ms * 1e3:9.1f} us  {row['gbps']:8.0f} GB/s  {row['bandwidth_fraction']:.0%} of copy  peers {row['peers']}", flush=True)
    return row


def add_recompiled_peers(row: dict, ours, sets, runs: int, device, compiles: int) -> None:
    """torch.compile's int8 peers (with Inductor's PDL as well, where ours launch with it) compiled
    `compiles - 1` more times, each from scratch (Dynamo reset, a fresh Inductor cache: a new
    coordinate descent, which lands on different tiles from run to run: 14336x4096 took 21.8-32.2 us
    over runs), each timed head to head with our tuned configuration again. The row's best peer is
    the best of all; ours in each round is kept beside it."""
    variants = (False, True) if "torch_compile_int8_pdl" in row["peers"] else (False,)
    for round_ in range(2, compiles + 1):
        for pdl in variants:
            name = f"torch_compile_int8{'_pdl' if pdl else ''}_compile{round_}"
            calls, failed = peer_calls({name: (lambda inputs: inputs[:3], fresh_int8_peer(pdl)[0])}, sets)
            for peer_name, call in calls.items():
                ours_ms, peer_ms = head_to_head([ours, call], runs, device)
                row["peers"][peer_name] = peer_ms
                row.setdefault("ms_in_recompile_rounds", []).append(ours_ms)
            row["peers"].update(failed)


# ---- read floors: what only reading a GEMV's weight bytes costs ------------------------------------

@triton.jit
def read_span(w_ptr, out_ptr, N, WORDS, SPAN, PRE, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, STAGES: tl.constexpr, PDL: tl.constexpr = 0):
    """Sums BLOCK_N rows over a span of SPAN words (program_id(1) picks the span): PRE words before
    the PDL wait, the rest after it; the floors here read the whole row before it."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ptrs = w_ptr + (rows % N)[:, None].to(tl.int64) * WORDS + tl.program_id(1) * SPAN + tl.arange(0, BLOCK_W)[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.int32)
    for s in tl.range(0, PRE, BLOCK_W, num_stages=STAGES):  # STAGES > 1: loads streamed through shared memory
        acc += tl.load(ptrs + s)
    pdl_wait(PDL)  # weights only above; the next kernel let in right after the wait
    for s in tl.range(PRE, SPAN, BLOCK_W, num_stages=STAGES):
        acc += tl.load(ptrs + s)
    tl.store(out_ptr + tl.program_id(1) * N + rows, tl.sum(acc, axis=1), mask=rows < N)


class ReadPass:
    """The read-only kernel over rotating copies past L2 of an [n, row_bytes] buffer (int32 words)."""

    def __init__(self, n: int, row_bytes: int, device, l2_bytes: int | None):
        self.n, self.words, self.device = n, row_bytes // 4, device
        self.copies = sets_past_l2(n * row_bytes, l2_bytes)
        self.bufs = [torch.randint(-2**31, 2**31 - 1, (n, self.words), dtype=torch.int32, device=device) for _ in range(self.copies)]
        self.out = torch.empty(n, dtype=torch.int32, device=device)  # row sums

    def launch(self, bn: int, bw: int, nw: int, stages: int, i: int, pdl: bool = False) -> None:
        """One pass over copy i with BLOCK_N rows, BLOCK_W words a row a step, every read before the
        PDL wait; pdl: launched with programmatic dependent launch, the next kernel let in at the wait."""
        extra = {"PDL": PDL_TRIGGERS["wait"], "launch_pdl": True} if pdl else {}
        read_span[(-(-self.n // bn), 1)](self.bufs[i % self.copies], self.out, self.n, self.words, self.words, self.words,
                                         BLOCK_N=bn, BLOCK_W=bw, STAGES=stages, num_warps=nw, **extra)

    def time(self, bn: int, bw: int, nw: int, stages: int, runs: int, pdl: bool = False) -> float:
        """Median device ms of one pass after three warm-up calls, in CUDA graphs of 20 calls (raises when it cannot run)."""
        for i in range(3):
            self.launch(bn, bw, nw, stages, i, pdl)
        return float(np.median(time_device_calls(lambda i: self.launch(bn, bw, nw, stages, i, pdl), runs, self.device)))


def read_floor(n: int, row_bytes: int, device, l2_bytes: int | None, runs: int, pdl: bool = False) -> dict:
    """Fastest read-only pass over [n, row_bytes] bytes, as int32 words, over copies past L2: loads
    straight to registers (STAGES 1) or streamed through shared memory (cp.async, STAGES 3 and 5);
    pdl: each pass launched with PDL, every read before its wait, the next pass let in after its loop."""
    reads = ReadPass(n, row_bytes, device, l2_bytes)
    best = None
    for bn in (1, 2, 4, 8, 16):
        for bw in (32, 64, 128, 256, 512, 1024):
            if reads.words % bw or bn * bw > 8192 or bn * bw < 512:
                continue
            for nw, stages in itertools.product((4, 8), (1, 3, 5)):
                try:
                    ms = reads.time(bn, bw, nw, stages, runs, pdl)
                except Exception as exc:  # noqa: BLE001 - out of resources: skip the configuration
                    print("read floor config failed", bn, bw, nw, stages, str(exc).splitlines()[0][:120])
                    continue
                if best is None or ms < best["ms"]:
                    best = {"ms": ms, "BLOCK_N": bn, "BLOCK_W": bw, "num_warps": nw, "STAGES": stages}
    best["gbps"] = n * row_bytes / (best["ms"] / 1e3) / 1e9
    return best


def add_read_floor(row: dict, shape, int4: bool, device, l2, runs: int, ceilings: dict) -> None:
    """What only reading the weight bytes costs at this size (a read-only kernel's best time): the
    row's time as a fraction of it beside the fraction of the large-buffer copy bandwidth. Where the
    row's kernel launched with PDL, also the floor of passes launched so, every read before the wait
    (read_floor_pdl; the plain floor leaves out what PDL gives ours). Neither is the most a chain of
    reads can overlap: with part of each pass's reads after its wait a read-only chain goes faster
    still (docs/kernels.md, "Read floors")."""
    m, n, k = shape
    row_bytes = k // 2 if int4 else k
    copy = ceilings["copy_gbps"]
    for key, pdl in (("read_floor", False), ("read_floor_pdl", True)) if row.get("pdl") else (("read_floor", False),):
        floor = read_floor(n, row_bytes, device, l2, runs, pdl=pdl)
        floor["fraction_of_copy"] = floor["gbps"] / copy
        row[key] = floor
        row[f"fraction_of_{key}"] = floor["ms"] / row["ms"]
        print(f"{'':22s} {key} {floor['ms'] * 1e3:.1f} us ({floor['gbps']:.0f} GB/s, {floor['fraction_of_copy']:.1%} of copy): kernel at {row[f'fraction_of_{key}']:.0%} of it", flush=True)


def gemv_peers(dtype, device=None):
    """bf16 cuBLAS on the float weight, and torch.compile of the user's int8 path."""
    def as_float(inputs):
        x, w_q, scales = inputs[:3]
        return x, (w_q.to(dtype) * scales[:, None]).to(dtype)

    return {"cublas_bf16_linear": (as_float, F.linear), **compiled_int8_peers(device)}


def compiled_int8_peers(device=None):
    """torch.compile's int8 weight-only Linear over the same int8 rows and scales (decode gated: both
    halves); where our kernels launch with PDL, the same with Inductor's PDL as well."""
    peers = {"torch_compile_int8": (lambda inputs: inputs[:3], compiled_int8_peer())}
    if device is not None and pdl_supported(device):
        why = inductor_pdl_unavailable(device)
        peers["torch_compile_int8_pdl"] = (lambda inputs: inputs[:3], compiled_int8_peer(pdl=True)) if why is None else (_refuse(why), None)
    return peers


def _refuse(why: str):
    """A peer's input maker that fails with `why` (recorded in the row as the peer's failure)."""
    def make_inputs(inputs):
        raise RuntimeError(why)
    return make_inputs


def int4_peers(dtype):
    """torch's own int4 path on CUDA (tinygemm, `_weight_int4pack_mm`) on the same weights, and cuBLAS bf16."""
    from agnitra.kernels.quant.formats import int4_dequantize
    from agnitra.transforms.quantize import Int4WeightOnlyLinear

    def as_float(inputs):
        x, packed, scales, zeros, g, bias = inputs
        return x, int4_dequantize(packed, scales, zeros, g, dtype).to(dtype)

    def as_tinygemm(inputs):
        x, packed, scales, zeros, g, bias = inputs
        linear = torch.nn.Linear(x.shape[1], packed.shape[0], bias=False, device=x.device, dtype=dtype)
        linear.weight.data = int4_dequantize(packed, scales, zeros, g, dtype).to(dtype)
        return x, Int4WeightOnlyLinear.from_linear(linear, group_size=g, layout="cuda")

    return {"cublas_bf16_linear": (as_float, F.linear), "torch_tinygemm_int4": (as_tinygemm, lambda x, module: module(x))}


def norm_peers(name):
    reference = get_kernel(name).reference
    compiled = torch.compile(reference, dynamic=False)
    return {"eager": (lambda s: s, reference), "torch_compile": (lambda s: s, compiled)}


def linear_gelu_peers():
    """cuBLAS Linear then GELU (eager), and the same through torch.compile (Inductor)."""
    def eager(x, w, bias):
        return F.gelu(F.linear(x, w, bias))

    return {"eager": (lambda s: s, eager), "torch_compile": (lambda s: s, torch.compile(eager, dynamic=False))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes: check the script on the CPU under TRITON_INTERPRET=1")
    parser.add_argument("--shapes", default="8b,1b", help="GEMV shape sets: 8b (llama-8b decode), 1b (llama-1b decode), or NxK (batch 1), comma-separated")
    parser.add_argument("--max-trials", type=int, default=16, help="TPE trials per problem where the space is large")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"kernel groups to run: {', '.join(GROUPS)}")
    parser.add_argument("--out-file", default=None)
    parser.add_argument("--gemv-kernels", default="int8_gemv,int4_gemv", help="which GEMVs the gemv group runs")
    parser.add_argument("--retune", action="store_true", help="tune every problem again (the cache's entry replaced) instead of reusing the cached tuning")
    parser.add_argument("--refine", action="store_true", help="re-judge each cached tuning against its kernel's refinements (autotune.refine) before timing")
    parser.add_argument("--peer-compiles", type=int, default=1, help="compile torch.compile's int8 peer this many times afresh per shape, keep its best")
    args = parser.parse_args()
    device = resolve_device(args.device)
    report = api.describe_device(device)
    settled = settle(device)
    cache = TuningCache(load_settings().cache_path, report.signature["id"])
    l2 = report.signature.get("l2_bytes")
    dtype = torch.bfloat16
    rows = []
    sets = {"8b": LLAMA_8B[:2] if args.quick else LLAMA_8B, "1b": LLAMA_1B[:2] if args.quick else LLAMA_1B}
    gemv_shapes = [(1, 48, 128), (3, 40, 256)] if args.smoke else [s for key in args.shapes.split(",") for s in sets.get(key) or [(1, *map(int, key.split("x")))]]
    norm_shape, mm_shape = ((6, 96), (32, 48, 64)) if args.smoke else ((8192, 4096), (4096, 4096, 4096))
    dtype = torch.float16 if args.smoke else dtype  # the interpreter's tl.dot is wrong for bf16
    slug = "".join(ch if ch.isalnum() else "-" for ch in report.name.lower()).strip("-")
    path = Path(args.out_file or f"benchmarks/results/kernels-{slug}-{dt.date.today().isoformat()}.json")
    path.parent.mkdir(parents=True, exist_ok=True)

    def add(name, problem, peers, then=None):  # written after every row: a killed run keeps what it measured
        try:
            rows.append(bench_kernel(name, problem, dtype, device, cache, l2, report.ceilings, args.runs, peers, args.max_trials, args.peer_compiles, args.retune, args.refine))
            if then is not None:
                then(rows[-1])
        except Exception as exc:  # noqa: BLE001 - one failing kernel must not lose the others
            rows.append({"kernel": name, "shape": list(problem), "status": "failed", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
            print(f"{name} {problem} FAILED: {rows[-1]['error']}", flush=True)
        write_result(path, "agnitra.kernels-bench/1", report, runs=args.runs, settled=settled, rows=rows)

    groups = set(args.only.split(","))
    if "matmul" in groups:
        add("matmul", mm_shape, {"torch_matmul": (lambda s: s, get_kernel("matmul").reference)})
    if "norms" in groups:
        for name in ("rms_norm_residual", "layer_norm_residual"):
            add(name, norm_shape, norm_peers(name))
    if "gemv" in groups:
        for shape in gemv_shapes:
            for name in args.gemv_kernels.split(","):
                problem = shape if name.startswith("int8") else (*shape, 128)
                floor = (lambda row, s=shape, i4=name.startswith("int4"): add_read_floor(row, s, i4, device, l2, args.runs, report.ceilings)) if device.type == "cuda" else None
                add(name, problem, gemv_peers(dtype, device) if name.startswith("int8") else (int4_peers(dtype) if device.type == "cuda" else {}), then=floor)
    if "decode" in groups:
        cases = [("decode_gemv", (1, 24, 96)), ("decode_gemv_gated", (2, 20, 64)), ("decode_attention", (1, 4, 16, 2, 40))] if args.smoke else [c for key in args.shapes.split(",") for c in DECODE.get(key, [])]
        for name, problem in cases:  # GEMVs: beside torch.compile's int8 Linear on the same weights (no norm, no epilogue)
            add(name, problem, compiled_int8_peers(device) if name.startswith("decode_gemv") else {})
    if "encoder" in groups:  # fp16, as the bert-base workload runs
        dtype = torch.float16
        for name, problem in ([("matmul_bias_gelu", (40, 96, 64))] if args.smoke else ENCODER):
            add(name, problem, linear_gelu_peers())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

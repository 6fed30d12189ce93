"""Does timing a GEMV beside its peers change its time? The tuned int4 GEMV timed head to head with
each subset of the contenders `kernels.py` times it with (its default and no-PDL variants, cuBLAS
bf16, tinygemm), each subset twice, in one process.

    PYTHONPATH=src python benchmarks/peer_influence.py --shapes 14336x4096 --out-file out.json

Written because kernels.py timed 14336x4096's FIXUP-wait winner at 12.22-12.24 us while ab_config.py
(ours against ours only) timed the same configuration at 12.03-12.05 us.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from agnitra.kernels.autotune import head_to_head
from agnitra.kernels.spec import get_kernel
from kernels import int4_peers, peer_calls  # benchmarks/: the peers kernels.py times beside the int4 GEMV
from pdl_trigger import gemv_context, tuned_gemv
from steady import settle
from result_file import write_result  # benchmarks/

SUBSETS = (("tuned", "tuned_again"), ("tuned", "default", "no_pdl"), ("tuned", "cublas_bf16_linear"), ("tuned", "torch_tinygemm_int4"),
           ("tuned", "default", "no_pdl", "cublas_bf16_linear", "torch_tinygemm_int4"))


DRIFT_LOAD_S = 0.15  # seconds of steady.settle's 1 GiB stream: about the 200 passes of the first drift runs
GPU_STATE = "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active"


def gpu_state() -> str:
    """nvidia-smi's SM and memory clocks, temperature, power and active clock-event (throttle) reasons now."""
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={GPU_STATE}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {exc}"


def drift(calls: dict, runs: int, device, shape) -> list[dict]:
    """Ours timed alone (as its own pair) at each step of: start, after cuBLAS ran as long as in
    kernels.py, after 5 s and 30 s idle, after cuBLAS again; the GPU's state read before each timing."""
    steps = []

    def step(label: str, names=("tuned", "tuned_again")):
        state = gpu_state()
        times = dict(zip(names, head_to_head([calls[n] for n in names], runs, device)))
        steps.append({"step": label, "gpu_state_before": state, "gpu_state_after": gpu_state(), "contenders": list(names), "ms": times})
        print(shape, label, state, {n: round(ms * 1e3, 2) for n, ms in times.items()}, flush=True)

    step("start")
    step("start again")
    if os.environ.get("DRIFT_CAUSE"):  # which part of a long memory-bound load flips ours: its allocation, or traffic from another process
        spare = torch.empty(256 * 1024**2, device=device)  # 1 GiB allocated, never touched
        del spare
        step("after a 1 GiB allocation, untouched")
        subprocess.run([sys.executable, "-c", f"import torch, steady; steady.settle(torch.device('cuda'), {DRIFT_LOAD_S})"],
                       check=True, timeout=120, cwd=Path(__file__).parent)
        step("after the 1 GiB stream (settle) in another process")
    settle(device, DRIFT_LOAD_S)  # a long memory-bound load, no cuBLAS
    step("after the 1 GiB stream (settle)")
    for i in range(600):  # cuBLAS eager, outside any graph
        calls["cublas_bf16_linear"](i)
    torch.cuda.synchronize(device)
    step("after cublas eager x600")
    step("beside cublas", ("tuned", "cublas_bf16_linear"))
    step("after cublas")
    time.sleep(5)
    step("after 5 s idle")
    time.sleep(30)
    step("after 30 s more idle")
    step("beside cublas again", ("tuned", "cublas_bf16_linear"))
    step("after cublas again")
    torch.cuda.empty_cache()
    step("after empty_cache")
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="14336x4096")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--drift", action="store_true",
                        help="instead: ours alone, after cuBLAS, after idle pauses, with the GPU's clocks and throttle reasons at each step")
    parser.add_argument("--out-file", required=True)
    args = parser.parse_args()
    context = gemv_context()
    device, report = context[:2]
    settled = None if args.drift else settle(device)  # --drift starts from the state the GPU is in
    spec = get_kernel("int4_gemv")
    rows = []
    for text in args.shapes.split(","):
        n, k = map(int, text.split("x"))
        shape, sets, best = tuned_gemv(spec, n, k, context, args.runs, 100)
        ours = {"tuned": best, "tuned_again": best, "default": spec.default_config(shape, torch.bfloat16), "no_pdl": {**best, "PDL": False}}
        calls = {label: (lambda j, c=c: spec.launch(*sets[j % len(sets)], config=c)) for label, c in ours.items()}
        peers, failed = peer_calls(int4_peers(torch.bfloat16), sets)
        calls.update(peers)
        timings = drift(calls, args.runs, device, shape) if args.drift else []
        for repeat in range(0 if args.drift else args.repeats):
            for subset in SUBSETS:
                present = [label for label in subset if label in calls]
                times = dict(zip(present, head_to_head([calls[label] for label in present], args.runs, device)))
                timings.append({"repeat": repeat, "contenders": present, "ms": times})
                print(shape, repeat, {label: round(ms * 1e3, 2) for label, ms in times.items()}, flush=True)
        rows.append({"shape": list(shape), "config": best, "timings": timings, "failed": failed})
        write_result(args.out_file, "agnitra.peer-influence/1", report, runs=args.runs, settled=settled,
                     timing="CUDA graphs of 20 calls, inputs rotated past L2, 3 interleaved rounds per subset, median", rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

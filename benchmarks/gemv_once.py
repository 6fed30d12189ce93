"""Launch batch-1 int4 (or int8: --int8) GEMVs a few times each, for a profiler (ncu) to read their counters.

    ncu --clock-control none -k regex:int4 python3 benchmarks/gemv_once.py --n 128256 --k 4096 \
        --config '{"KERNEL": "rows", "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 2, "VEC": 2, "PREFETCH": true}'

Each --config (a JSON object, repeatable) runs after two warm-up launches; tinygemm
(`torch._weight_int4pack_mm`) runs too unless --no-peer, so the profile holds the peer beside ours.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from agnitra.kernels import quant_matmul as qm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=128256)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--config", action="append", default=[], help="an int4 (int8 with --int8) GEMV config as JSON (repeatable)")
    parser.add_argument("--int8", action="store_true", help="the int8 GEMV (no peer)")
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda")
    if args.int8:
        x, w8, s8, _ = qm._make_int8_inputs((1, args.n, args.k), torch.bfloat16, device, 0)
        for text in args.config:
            for _ in range(2 + args.launches):
                qm.int8_weight_only_matmul(x, w8, s8, config={"path": "gemv", **json.loads(text)})
        torch.cuda.synchronize()
        print("launched", len(args.config), "int8 configs")
        return 0
    x, w, s, z, g, _ = qm._make_int4_inputs((1, args.n, args.k, args.group), torch.bfloat16, device, 0)
    for text in args.config:
        config = {"path": "gemv", **json.loads(text)}
        for _ in range(2 + args.launches):
            qm.int4_weight_only_matmul(x, w, s, z, g, config=config)
    if not args.no_peer:
        from kernels import int4_peers  # benchmarks/kernels.py: tinygemm's packing of the same weights

        make_inputs, fn = int4_peers(torch.bfloat16)["torch_tinygemm_int4"]
        inputs = make_inputs((x, w, s, z, g, None))
        for _ in range(2 + args.launches):
            fn(*inputs)
    torch.cuda.synchronize()
    print("launched", len(args.config), "configs", "and tinygemm" if not args.no_peer else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

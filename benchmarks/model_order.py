"""What the `model` strategy would measure first on a workload, without measuring: the cost model
trained on the committed datasets of one device kind, the workload's space built for that device
(a GPU context is described, not used: the transforms' checks read its compute capability), the
peers' runs told first as `optimize` tells them, then each asked recipe told an assumed result.

    python benchmarks/model_order.py zoo:llama-1b --dtype bf16 --tokens 128 --seq-len 32 \
        --transforms fuse-projections,int8-weight-only,triton-kernels,compile \
        --peer "compile-reduce-overhead=11.2" --assume 13 --asks 5

--peer NAME=SPEEDUP: a peer's measured speedup over the baseline (told first, as in a run);
--assume: the speedup each asked recipe is told (a flat guess: what matters is what is asked
next, not the value). Writes benchmarks/results/model-order-<workload>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from agnitra.bench.variants import get_variant  # noqa: E402
from agnitra.results import CandidateResult, Correctness  # noqa: E402
from agnitra.search.costmodel import CostModel, load_rows  # noqa: E402
from agnitra.search.costmodel.context import workload_row  # noqa: E402
from agnitra.search.optimize import graph_facts  # noqa: E402
from agnitra.search.space import recipe_space  # noqa: E402
from agnitra.search.strategies.model import ModelGuided  # noqa: E402
from agnitra.telemetry.signature import software_versions  # noqa: E402
from agnitra.transforms.base import TransformContext  # noqa: E402
from agnitra.workloads.registry import BuildOptions  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class DescribedDevice:
    """The device features a stored row of that kind carries (`dev.*`), as a DeviceReport gives them."""

    def __init__(self, rows: list[dict]) -> None:
        self.signature = {k[len("dev."):]: v for k, v in rows[-1].items() if k.startswith("dev.") and v is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--device-kind", default="cuda")
    parser.add_argument("--capability", default="9.0", help="the GPU's compute capability the space is built for")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--tokens", type=int)
    parser.add_argument("--transforms", default="")
    parser.add_argument("--peer", action="append", default=[], help="NAME=SPEEDUP")
    parser.add_argument("--assume", type=float, default=1.0)
    parser.add_argument("--asks", type=int, default=5)
    parser.add_argument("--dataset", action="append")
    parser.add_argument("--out-file")
    args = parser.parse_args()

    from agnitra.workloads.registry import build_workload

    major, minor = (int(x) for x in args.capability.split("."))
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    paths = args.dataset or sorted(str(p) for p in (ROOT / "benchmarks" / "datasets").glob("*.csv"))
    rows = load_rows(datasets=paths, device_kind=args.device_kind)
    name = args.spec.split(":", 1)[-1]
    workload = build_workload(name, BuildOptions(dtype=DTYPES[args.dtype], batch=args.batch, seq_len=args.seq_len, tokens=args.tokens))
    notes: list[str] = []
    op_kinds, signature = graph_facts(workload, notes, timed=False)  # nothing is measured here
    device = torch.device(args.device_kind)
    space, _ = recipe_space(TransformContext(workload, device, op_kinds=op_kinds), allowed=set(args.transforms.split(",")) if args.transforms else None)
    strategy = ModelGuided(space, CostModel.fit(rows), rows, workload_row(workload, signature, DescribedDevice(rows), device))
    by_key = {c.recipe.key(): c for c in space}
    told = []
    for peer in args.peer:
        peer_name, _, speedup = peer.partition("=")
        candidate = by_key.get(get_variant(peer_name).recipe.key())
        if candidate is not None:
            strategy.tell(candidate, _result(candidate, float(speedup)))
            told.append({"peer": peer_name, "recipe": candidate.recipe.name, "speedup": float(speedup)})
    asked = []
    for _ in range(args.asks):
        candidate = strategy.ask()
        if candidate is None:
            break
        prediction = strategy.predicted(candidate)
        asked.append({"recipe": candidate.recipe.name, "predicted": prediction})
        print(f"{len(asked)}. {candidate.recipe.name}  (predicted {prediction['speedup']:.2f}x, P(pass) {prediction['p_pass']:.2f}, setup {prediction['setup_s'] or 0:.0f} s)", flush=True)
        strategy.tell(candidate, _result(candidate, args.assume))
    doc = {
        "schema": "agnitra.model-order/1", "date": dt.date.today().isoformat(), "command": " ".join(sys.argv), "versions": software_versions(),
        "datasets": [Path(p).name for p in paths], "training_rows": len(rows), "space_size": len(space), "notes": notes,
        "conditions": {"device_kind": args.device_kind, "capability": args.capability, "dtype": args.dtype, "transforms": args.transforms or "all",
                       "what": "nothing measured: the model strategy's asks, the peers told first, each ask told --assume"},
        "peers_told": told, "asked": asked,
    }
    out = Path(args.out_file) if args.out_file else ROOT / "benchmarks" / "results" / f"model-order-{name}-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {out}")


def _result(candidate, speedup: float) -> CandidateResult:
    recipe = candidate.recipe
    return CandidateResult(recipe.name, recipe.to_dict(), recipe.key(), candidate.prior, "ok", speedup=speedup, correctness=Correctness("logits", 30.0, True, 20.0))


if __name__ == "__main__":
    main()

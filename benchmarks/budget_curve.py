"""Budget curve: what `agnitra optimize` returns at each budget, run exactly as a user runs it.

    PYTHONPATH=src python benchmarks/budget_curve.py --device cpu --budgets 1m --workloads hf:distilbert --size small
    PYTHONPATH=src python benchmarks/budget_curve.py --device cuda --budgets 2m --lanes 4 --deadline-s 540 \\
        --workloads zoo:bert-base@b1,zoo:bert-base@b32,zoo:resnet50@b64,zoo:llama-1b,hf:roberta,hf:mistral,hf:vit,hf:whisper-encoder --out /tmp/out/budget-curve-2m.json
    PYTHONPATH=src python benchmarks/budget_curve.py --device cuda --budgets 2m --strategies default,ppo --agent-dir .devagent \\
        --workloads zoo:bert-base@b1,hf:whisper-encoder --out /tmp/out/budget-curve-2m-ppo.json
    PYTHONPATH=src python benchmarks/budget_curve.py --merge A.json B.json --out merged.json

For each budget (--budgets, default 1m,2m,3m,5m,10m) and workload, one `agnitra optimize` process with
the CLI's default flags (the workload's size flags, --dtype on the GPU, --budget, a fresh --out folder,
--json), each against a fresh copy of the store as it was at the start (no run learns from another's
measurements) and, unless --warm-caches, with empty Inductor and Triton caches (a first run). Per run,
from the run folder's report.json: the answer (the chosen recipe, a peer's, or the original model), its
speedup over eager, over the fastest torch.compile mode and the fastest ONNX Runtime peer measured in
the same run (the final run's variants that passed verification; without them, the search's peer
candidates), the budget left unused, the process's wall time, the candidates measured, the time to the
first verified improvement, whether the original was returned though a candidate passed, and the
verdict line. A summary per budget; a plot (self-contained HTML, and PNG where kaleido is installed)
of the speedup over eager and over the best compile mode against the budget, one line per workload.

Strategies (--strategies default,ppo; default: `default` alone, the CLI's own choice, no --strategy
flag): each (budget, workload) row runs once per strategy under the same conditions (`--strategy S`
added to the command); rows, summary and plot name the strategy, and `comparison` judges each other
strategy's answer against the default's per workload at each budget (`compare_strategies`): faster,
at least as fast within the noise, or slower; whether the default's answer was the compile peer; and
whether the workload was held out of the agent's training (--held-out, else read off the policy
records' `training_workloads`); the share at least as fast against issue 55's 80% target. --agent-dir
DIR (what `agnitra agent train` writes under `<cache>/agent`: `<class>/policy-NNNN.{pt,json}`) gives
every run a cache folder of its own whose `agent` is a copy of DIR and whose other entries link to
the configured cache's (tuning, ceilings: shared as without it), so `--strategy ppo` plays that policy.

Lanes: on the GPU, --lanes N runs N processes side by side, one GPU each (CUDA_VISIBLE_DEVICES); on
the CPU one at a time. --deadline-s bounds the whole command: a row that would not end before it is
skipped, said in the file, and a run still going at the deadline is stopped (SIGTERM, then SIGKILL).

Hugging Face families (`hf:NAME`, benchmarks/hf_families.py's twelve, random weights from their
configs, nothing downloaded) are built by the factories of this file, at `--size base` the widths
people serve: encoders hidden 768 at batch 8 x 128, decoders hidden 1024 run forward at batch 4 x 128,
vision at batch 16 x 224. A user's command for one: `agnitra optimize
benchmarks/budget_curve.py:hf_roberta --batch 8 --seq-len 128 --device cuda --dtype fp16 --budget 2m`.

Writes benchmarks/results/budget-curve-<device>-<date>.json (or --out) and the .html beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = "agnitra.bench.budget-curve/1"
DEFAULT_BUDGETS = "1m,2m,3m,5m,10m"
COMPILE_PEERS = ("compile", "compile-max-autotune", "compile-reduce-overhead")
ORT_PEERS = ("onnxruntime", "onnxruntime-int8")
WITHIN_NOISE = 0.97  # without an interval: the answer counts as at least the best compile at this ratio or above
WALL_FACTOR, START_S = 1.1, 15.0  # a row's expected wall: its budget x 1.1 + the process's start (a 5-minute row: ~5.8 min)
STOP_GRACE_S = 20.0  # after SIGTERM at the deadline, before SIGKILL
DEFAULT_STRATEGY = "default"  # no --strategy flag: the CLI's own default
SHARED_CACHE = ("tuning", "ceilings", "layout", "zoo")  # the cache's folders runs share (kernel tuning, measured ceilings, layout orders, trained zoo weights)
TARGET_SHARE = 0.8  # issue 55: another strategy's answer at least as fast as the default's on 80% of the workloads

# ---- the Hugging Face families at the sizes people serve (factories the CLI loads as file.py:factory) ----

KIND = {"gpt2": "decoder", "opt": "decoder", "mistral": "decoder", "vit": "vision", "convnet": "vision"}  # the rest: encoders
SERVE = {"encoder": (8, 128), "decoder": (4, 128), "vision": (16, 224)}  # (batch, sequence or image side) at base
# base: (hidden, layers, heads, ffn) as the released base checkpoints are shaped
BASE = {"encoder": (768, 12, 12, 3072), "decoder": (1024, 24, 16, 4096), "vision": (768, 12, 12, 3072)}
BASE_OF = {"distilbert": (768, 6, 12, 3072), "bart": (768, 6, 12, 3072),  # distilbert-base, bart-base: 6 layers (bart: 6 + 6)
           "mistral": (1024, 24, 16, 2816),  # a gated MLP: ~2.75 x hidden, as Llama-style models of this width
           "convnet": (512, 0, 0, 0)}  # hf_families' ConvNet of width hidden/8: 64, 128, 256 channels
SIZES = ("base", "small", "tiny")  # small, tiny: hf_families' presets (the CLI's --size passes them)


def families():
    """benchmarks/hf_families.py as the module `hf_families`, loaded from its file: benchmarks/ is not put
    on sys.path (transformers would import benchmarks/kernels.py as the `kernels` package), and the
    module travels by value into optimize's worker (cloudpickle), which need not find it either."""
    module = sys.modules.get("hf_families")
    if module is None:
        spec = importlib.util.spec_from_file_location("hf_families", HERE / "hf_families.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["hf_families"] = module
        spec.loader.exec_module(module)
    try:
        import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    except ImportError:  # no worker without cloudpickle either
        pass
    return module


def family_kind(name: str) -> str:
    return KIND.get(name, "encoder")


def build_family(name: str, size: str = "base", batch: int | None = None, seq_len: int | None = None):
    """An agnitra Workload of hf_families' family `name` at `size`: base as above, small and tiny
    hf_families' own presets; the inputs at `batch` (default: the kind's serving batch) and, for
    sequence models, `seq_len` (default 128 at base, the preset's otherwise)."""
    import torch

    from agnitra.workloads.base import Workload

    hf_families = families()

    if name not in hf_families.FAMILIES:
        raise ValueError(f"unknown family {name}; the twelve: {', '.join(hf_families.FAMILIES)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size}; use one of {', '.join(SIZES)}")
    kind = family_kind(name)
    if kind == "vision" and seq_len is not None:
        raise ValueError(f"{name} takes images, not a sequence: drop --seq-len")
    batch = batch or SERVE[kind][0]
    torch.manual_seed(0)
    if size == "base":
        dims = (*BASE_OF.get(name, BASE[kind]), seq_len or SERVE[kind][1])
    else:
        preset = hf_families.SIZES[size]
        dims = (*preset[:4], seq_len or preset[4])
    if name == "vit" and size == "base":  # ViT-B/16 at 224 (hf_families' builder fixes a 64-pixel image)
        from transformers import ViTConfig, ViTModel

        d, n, h, f, _ = dims
        side = SERVE["vision"][1]
        config = ViTConfig(hidden_size=d, num_hidden_layers=n, num_attention_heads=h, intermediate_size=f, image_size=side, patch_size=16)
        model, inputs = hf_families.Main(ViTModel(config, add_pooling_layer=False), ("pixel_values",)), (torch.zeros(1, 3, side, side),)
    else:
        model, inputs = hf_families.FAMILIES[name].build(dims)
        if name == "convnet" and size == "base":
            inputs = (torch.zeros(1, 3, SERVE["vision"][1], SERVE["vision"][1]),)
    inputs = tuple(rebatched(t, batch, seed) for seed, t in enumerate(inputs))
    task = "classifier" if name == "convnet" else "encoder"
    return Workload(name=f"{name}-{size}-b{batch}", model=model.eval(), example_inputs=inputs, task=task, weights="random", source=f"hf-families:{name}", batch=batch)


def rebatched(t, batch: int, seed: int):
    """An input like `t` with `batch` rows of fresh seeded values (token ids as hf_families draws them)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    shape = (batch, *t.shape[1:])
    if t.dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=t.dtype)
    return torch.randint(3, 256, shape, generator=gen, dtype=t.dtype)


def _factory(name: str):
    def make(batch: int | None = None, seq_len: int | None = None, size: str = "base"):
        return build_family(name, size, batch, seq_len)

    make.__name__ = make.__qualname__ = factory_name(name)
    make.__doc__ = f"hf_families' {name} for `agnitra optimize benchmarks/budget_curve.py:{factory_name(name)}` (--batch, --seq-len, --size small|tiny)"
    return make


def factory_name(family: str) -> str:
    return "hf_" + family.replace("-", "_")


# hf_families' twelve, each a factory hf_NAME of this file (tests check the two lists agree)
FAMILY_NAMES = ("gpt2", "distilbert", "roberta", "t5", "vit", "clip-text", "wav2vec2", "whisper-encoder", "bart", "opt", "mistral", "convnet")
for _family in FAMILY_NAMES:
    globals()[factory_name(_family)] = _factory(_family)

# ---- workloads: names to the CLI's arguments ----------------------------------------------------

ZOO = {  # zoo workload -> (default size flags, extra flags); @bN sets the batch
    "bert-base": ({"batch": 1, "seq_len": 128}, []),
    "resnet50": ({"batch": 64}, []),
    "llama-1b": ({"batch": 1, "seq_len": 32, "tokens": 128}, []),  # decode, as optimize.py's llama-1b-decode cases
    "minilm": ({}, ["--min-cosine", "0.99"]),  # as `make demo`; CPU only
}
DECODERS = {"llama-1b", "llama-8b", "tinylm", "tinylm-py"}  # bf16 on the GPU
CPU_ONLY = {"minilm"}
GPU_DEFAULT = "zoo:bert-base@b1,zoo:bert-base@b32,zoo:resnet50@b64,zoo:llama-1b"
CPU_DEFAULT = "zoo:minilm"


@dataclass
class Work:
    name: str  # as given: zoo:bert-base@b1, hf:roberta
    spec: str  # what the CLI is given
    flags: list[str] = field(default_factory=list)  # everything but --device, --budget, --out, --json


def parse_workload(text: str, device: str, size: str, dtype: str | None = None) -> Work:
    """`zoo:NAME[@bN]` or `hf:FAMILY[@bN]` -> the CLI's model argument and flags."""
    source, _, at = text.partition("@")
    batch = None
    if at:
        if not re.fullmatch(r"b\d+", at) and at != "decode":
            raise SystemExit(f"bad workload {text!r}: write NAME@bN (a batch), e.g. zoo:bert-base@b32")
        batch = int(at[1:]) if at != "decode" else None
    kind, _, name = source.partition(":")
    if kind == "zoo":
        if name in CPU_ONLY and device != "cpu":
            raise SystemExit(f"{text}: CPU only (its real weights are checked by cosine on the CPU); drop it or use --device cpu")
        sizes, extra = ZOO.get(name, ({}, []))
        sizes = {**sizes, **({"batch": batch} if batch else {})}
        spec = source
        half = "bf16" if name in DECODERS else "fp16"
    elif kind == "hf":
        hf_families = families()
        if name not in hf_families.FAMILIES:
            raise SystemExit(f"unknown family in {text!r}; the twelve: {', '.join(hf_families.FAMILIES)}")
        fam = family_kind(name)
        sizes = {"batch": batch or SERVE[fam][0]}
        if fam != "vision":
            sizes["seq_len"] = SERVE[fam][1] if size == "base" else hf_families.SIZES[size][4]
        if size != "base":
            sizes["size"] = size
        spec, extra, half = f"{_shown(HERE / 'budget_curve.py')}:{factory_name(name)}", [], "fp16"
    else:
        raise SystemExit(f"bad workload {text!r}: zoo:NAME[@bN] or hf:FAMILY[@bN]")
    flags = [x for k, v in sizes.items() for x in ("--" + k.replace("_", "-"), str(v))] + extra
    precision = dtype or (half if device == "cuda" else None)
    if precision and precision != "fp32":
        flags += ["--dtype", precision]
    return Work(text, spec, flags)


def _shown(path: Path) -> str:
    """`path` relative to the working directory where it is below it (as a user types it)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def parse_budget(text: str) -> float:
    """'90s', '2m', '1.5m', '1h' or seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise SystemExit(f"bad budget {text!r}: write e.g. 90s, 2m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_budgets(text: str) -> list[tuple[str, float]]:
    budgets = [(b.strip(), parse_budget(b)) for b in text.split(",") if b.strip()]
    if not budgets:
        raise SystemExit("--budgets names no budget; e.g. --budgets 2m,5m")
    return sorted(budgets, key=lambda b: b[1])


def expected_wall_s(budget_s: float) -> float:
    return budget_s * WALL_FACTOR + START_S


# ---- one report.json -> one row -------------------------------------------------------------------


def _median(variant: dict | None) -> float | None:
    lat = (variant or {}).get("latency_ms") or {}
    return lat.get("median")


def _passed(entry: dict) -> bool:
    return entry.get("status") == "ok" and bool((entry.get("correctness") or {}).get("passed"))


def peer_speedups(report: dict, names: tuple[str, ...]) -> tuple[dict[str, dict], str | None]:
    """The peers of `names` that ran and passed verification, each with its speedup over eager: from
    the final run's variants (baseline median / the peer's, its interval beside), else from the
    search's candidates that measured a peer (their `peer` field). Returns (peers, where from)."""
    variants = (report.get("bench") or {}).get("variants") or []
    base_ms = _median(variants[0]) if variants else None
    final = {v["name"]: {"speedup": base_ms / _median(v), "interval": v.get("speedup_interval")}
             for v in variants[1:] if v.get("name") in names and _passed(v) and _median(v) and base_ms}
    if final:
        return final, "final run"
    searched: dict[str, dict] = {}
    for c in report.get("candidates") or []:
        peer = c.get("peer")
        if peer in names and _passed(c) and c.get("speedup") and c["speedup"] > searched.get(peer, {}).get("speedup", 0.0):
            searched[peer] = {"speedup": c["speedup"], "interval": c.get("speedup_interval")}
    best = (report.get("search") or {}).get("best_compile") or {}  # the search's own summary, where the report has one
    if not searched and best.get("peer") in names and best.get("speedup"):
        searched[best["peer"]] = {"speedup": best["speedup"], "interval": None}
    return searched, "search" if searched else None


def _best(peers: dict[str, dict]) -> tuple[str | None, dict | None]:
    name = max(peers, key=lambda n: peers[n]["speedup"], default=None)
    return name, peers.get(name)


def answer_of(report: dict) -> tuple[str, str, float | None, list | None]:
    """(answer, kind: own | peer | original, speedup over eager, its final-run interval or None)."""
    chosen = report.get("chosen")
    if not chosen:
        return "original", "original", 1.0, None
    search = report.get("search") or {}
    peers = set(search.get("peers") or []) | set(COMPILE_PEERS) | set(ORT_PEERS)
    candidate_peers = {c.get("name") for c in report.get("candidates") or [] if c.get("peer")}
    kind = "peer" if chosen in peers or chosen in candidate_peers else "own"
    variant = next((v for v in (report.get("bench") or {}).get("variants") or [] if v.get("name") == chosen), None)
    return chosen, kind, report.get("speedup"), (variant or {}).get("speedup_interval")


def versus(answer: str, speedup: float | None, interval: list | None, peers: dict[str, dict], source: str | None) -> dict:
    """The answer against the fastest of `peers`: the ratio of speedups (same baseline) and whether the
    answer is at least as fast within the noise (its final-run interval reaches the peer's speedup;
    without an interval, ratio >= WITHIN_NOISE)."""
    name, best = _best(peers)
    out = {"best": name, "best_speedup": best and best["speedup"], "from": source, "peers": {n: p["speedup"] for n, p in peers.items()},
           "ratio": None, "at_least": None, "judged_by": None}
    if best is None or not speedup:
        return out
    ratio = speedup / best["speedup"]
    if answer == name:
        at_least, how = True, "the answer is this peer"
    elif interval and interval[1] is not None:
        at_least, how = interval[1] >= best["speedup"], "the answer's final-run interval"
    else:
        at_least, how = ratio >= WITHIN_NOISE, f"ratio >= {WITHIN_NOISE}"
    return {**out, "ratio": ratio, "at_least": at_least, "judged_by": how}


def row_from_report(report: dict) -> dict:
    """What the budget curve keeps of one optimize run's report.json (every field read with .get())."""
    search = report.get("search") or {}
    answer, kind, speedup, interval = answer_of(report)
    compile_peers, ort_peers = peer_speedups(report, COMPILE_PEERS), peer_speedups(report, ORT_PEERS)
    compiled, ort = versus(answer, speedup, interval, *compile_peers), versus(answer, speedup, interval, *ort_peers)
    best_peer, best = _best({**compile_peers[0], **ort_peers[0]})
    compared = best is not None and speedup is not None
    own_beats = kind == "own" and speedup > best["speedup"] if compared else None
    candidates = report.get("candidates") or []
    passed = [c for c in candidates if _passed(c)]  # a peer measured as a candidate counts: it passed too
    budget_s, elapsed_s = search.get("budget_s"), search.get("elapsed_s")
    unused_s = budget_s - elapsed_s if budget_s is not None and elapsed_s is not None else None
    return {
        "answer": answer, "answer_kind": kind, "recipe": report.get("recipe"),
        "speedup": speedup, "speedup_interval": interval,
        "best_compile": compiled["best"], "best_compile_speedup": compiled["best_speedup"], "compile_from": compiled["from"], "compile_peers": compiled["peers"],
        "speedup_vs_best_compile": compiled["ratio"], "at_least_best_compile": compiled["at_least"], "at_least_judged_by": compiled["judged_by"],
        "best_ort": ort["best"], "best_ort_speedup": ort["best_speedup"], "ort_from": ort["from"], "ort_peers": ort["peers"],
        "speedup_vs_best_ort": ort["ratio"], "at_least_best_ort": ort["at_least"],
        "best_peer": best_peer, "own_beats_best_peer": own_beats,
        "own_beats_best_peer_beyond_noise": bool(kind == "own" and interval and interval[0] is not None and interval[0] > best["speedup"]) if compared else None,
        "report_budget_s": budget_s, "elapsed_s": elapsed_s, "search_time_s": search.get("time_s"), "unused_s": unused_s,
        "unused_share": unused_s / budget_s if unused_s is not None and budget_s else None,
        "evaluated": search.get("evaluated"), "unmeasured": search.get("unmeasured"), "strategy": search.get("strategy"),
        "first_improvement_s": search.get("first_improvement_s"), "reserved_for_final_s": search.get("reserved_for_final_s"), "peers_s": search.get("peers_s"),
        "passed_candidates": len(passed), "passed_own_candidates": sum(1 for c in passed if not c.get("peer")),
        "passed_faster_candidates": sum(1 for c in passed if (c.get("speedup") or 0) > 1),
        "original_though_passed": answer == "original" and bool(passed),
        "verdict": report.get("verdict"), "notes": search.get("notes"),
        "agent_notes": [n for n in search.get("notes") or [] if isinstance(n, str) and n.startswith("ppo:")],
    }


# ---- running: one process a row, N lanes side by side, all before the deadline -----------------------


@dataclass
class Plan:
    work: Work
    budget: str
    budget_s: float
    strategy: str = DEFAULT_STRATEGY
    agent_dir: Path | None = None  # the policies each run's cache holds (`<class>/policy-NNNN.*`)


class Runner:
    """Runs the plans on `lanes` lanes (a GPU each on cuda), skipping what would end past the deadline."""

    def __init__(self, plans: list[Plan], device: str, lanes: list[str | None], runs: Path, deadline: float, store: Path | None,
                 warm_caches: bool, reports: Path | None, on_row, run=None) -> None:
        self.pending, self.device, self.lanes, self.runs, self.deadline = list(plans), device, lanes, runs, deadline
        self.store, self.warm_caches, self.reports, self.on_row = store, warm_caches, reports, on_row
        self.run_one = run or run_one  # tests pass their own
        self.lock = threading.Lock()

    def run(self) -> None:
        threads = [threading.Thread(target=self._lane, args=(i, gpu), daemon=True) for i, gpu in enumerate(self.lanes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for plan in self.pending:  # nothing fitted what was left
            self.on_row(skipped_row(plan, self.deadline - time.monotonic()))

    def _next(self) -> Plan | None:
        with self.lock:
            left = self.deadline - time.monotonic()
            for plan in self.pending:
                if expected_wall_s(plan.budget_s) <= left:
                    self.pending.remove(plan)
                    return plan
            return None

    def _lane(self, lane: int, gpu: str | None) -> None:
        while (plan := self._next()) is not None:
            self.on_row(self.run_one(plan, self.device, lane, gpu, self.runs, self.deadline, self.store, self.warm_caches, self.reports))


def skipped_row(plan: Plan, left: float) -> dict:
    return {"workload": plan.work.name, "budget": plan.budget, "budget_s": plan.budget_s, "strategy_asked": plan.strategy, "status": "skipped",
            "reason": f"would not end before the deadline: expected ~{expected_wall_s(plan.budget_s):.0f} s of wall, {max(0.0, left):.0f} s were left"}


LIVE: set[subprocess.Popen] = set()  # the runs going now: stopped with the command (they run in sessions of their own)
LIVE_LOCK = threading.Lock()


def stop_all(grace: float = STOP_GRACE_S) -> None:
    """SIGTERM to every run still going (its process group), SIGKILL to any that outlives `grace`."""
    with LIVE_LOCK:
        procs = list(LIVE)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def fresh(path: Path) -> Path:
    n, out = 1, path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}-{n}")
    return out


def command_of(plan: Plan, device: str, run_dir: Path) -> list[str]:
    """The user's command (`agnitra optimize ...`): the CLI's defaults for everything not given here."""
    strategy = [] if plan.strategy == DEFAULT_STRATEGY else ["--strategy", plan.strategy]
    return ["agnitra", "optimize", plan.work.spec, "--device", device, *plan.work.flags, *strategy, "--budget", plan.budget, "--out", str(run_dir), "--json"]


def run_name(plan: Plan) -> str:
    """A run folder's name: workload and budget, and the strategy where it is not the default."""
    return f"{slug(plan.work.name)}-{int(plan.budget_s)}s" + ("" if plan.strategy == DEFAULT_STRATEGY else f"-{slug(plan.strategy)}")


def agent_folder(path: Path) -> Path:
    """`path` as the folder of `<class>/policy-NNNN.json` files (a cache folder holding `agent/` taken too)."""
    folder = path / "agent" if (path / "agent").is_dir() else path
    if not any(folder.glob("*/policy-*.json")):
        raise SystemExit(f"--agent-dir {path}: no <class>/policy-NNNN.json under it; train one with `AGNITRA_CACHE_DIR=DIR agnitra agent train` and give DIR")
    return folder


def agent_records(folder: Path) -> dict[str, dict]:
    """Each device class's newest policy record in `folder` (the one a run plays), in short."""
    out = {}
    for cls in sorted(p for p in folder.iterdir() if p.is_dir()):
        records = sorted(cls.glob("policy-*.json"))
        if records:
            r = json.loads(records[-1].read_text())
            out[cls.name] = {"file": records[-1].name, **{k: r.get(k) for k in ("version", "device_class", "date", "agnitra", "training_rows", "workloads", "imitated",
                                                                                  "ppo_steps", "weights", "training_workloads")}}
    return out


def trained_on(records: dict[str, dict], device: str) -> dict[str, list[int]] | None:
    """The training workloads (name -> batches) of the policies a run on `device` would play; None where no record says."""
    found = [r.get("training_workloads") for cls, r in records.items() if (cls == "cpu") == (device == "cpu")]
    if not found or any(f is None for f in found):
        return None
    return {name: sorted({b for f in found for b in f.get(name, [])}) for f in found for name in f}


def held_out_of(work_name: str, training: dict[str, list[int]]) -> bool:
    """Whether a curve workload (zoo:NAME[@bN], hf:FAMILY[@bN]) is absent from the training workloads:
    its NAME, or for a family any `FAMILY-...` (hf_families' names), among them at any batch."""
    name = work_name.partition("@")[0].partition(":")[2]
    return not any(t == name or t.startswith(f"{name}-") for t in training)


def run_cache(scratch: Path, base: Path, agent: Path) -> Path:
    """One run's cache folder: every entry of the configured cache `base` linked (tuning, ceilings, ...:
    shared as a run without it shares them) but `agent`, a copy of the policies in `agent`."""
    cache = scratch / "cache"
    cache.mkdir(parents=True)
    for name in SHARED_CACHE:  # made first, so what one run tunes or measures the next finds, as without --agent-dir
        try:
            (base / name).mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
    if base.is_dir():
        for entry in base.iterdir():
            if entry.name != "agent":
                (cache / entry.name).symlink_to(entry.resolve())
    shutil.copytree(agent, cache / "agent")
    return cache


def run_one(plan: Plan, device: str, lane: int, gpu: str | None, runs: Path, deadline: float, store: Path | None, warm_caches: bool, reports: Path | None) -> dict:
    """One `agnitra optimize` process (as `python -m agnitra.cli`); its report.json read into a row."""
    run_dir = fresh(runs / run_name(plan))
    scratch = fresh(runs / f"{run_dir.name}.env")
    scratch.mkdir(parents=True)
    command = command_of(plan, device, run_dir)
    env = {"PYTHONUNBUFFERED": "1"}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if store is not None:  # a fresh copy of the store as it was at the start
        shutil.copyfile(store, scratch / "store.db")
        env["AGNITRA_DB_URL"] = f"sqlite:///{(scratch / 'store.db').resolve()}"
    caches = runs / f"caches-lane{lane}" if warm_caches else scratch
    env.update(TORCHINDUCTOR_CACHE_DIR=str((caches / "inductor").resolve()), TRITON_CACHE_DIR=str((caches / "triton").resolve()))
    if plan.agent_dir is not None:  # the policies to play, in a cache of the run's own
        from agnitra.config import load_settings

        env["AGNITRA_CACHE_DIR"] = str(run_cache(scratch, load_settings().cache_path, plan.agent_dir).resolve())
    row = {"workload": plan.work.name, "budget": plan.budget, "budget_s": plan.budget_s, "strategy_asked": plan.strategy, "lane": lane, "gpu": gpu,
           "command": shlex.join(command), "env": {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}, "run_dir": str(run_dir)}
    limit = min(deadline - time.monotonic(), plan.budget_s * 1.5 + 60)
    print(f"[lane {lane}{f' gpu {gpu}' if gpu is not None else ''}] {plan.work.name} @ {plan.budget} [{plan.strategy}]: {shlex.join(command)}", flush=True)
    started = time.monotonic()
    log = scratch / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "agnitra.cli", *command[1:]], stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, **env}, start_new_session=True)  # a group of its own: killed whole at the deadline
        with LIVE_LOCK:
            LIVE.add(proc)
        killed = None
        try:
            stdout, _ = proc.communicate(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            killed = "SIGTERM"
            proc.send_signal(signal.SIGTERM)  # the CLI keeps what it measured and exits 143
            try:
                stdout, _ = proc.communicate(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                killed = "SIGKILL"
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, _ = proc.communicate()
        finally:
            with LIVE_LOCK:
                LIVE.discard(proc)
    row.update(wall_s=round(time.monotonic() - started, 1), exit_code=proc.returncode, stderr_log=str(log))
    report = read_report(run_dir, stdout)
    if report is None:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:] or [""]
        row.update(status="killed" if killed else "failed", error=(f"stopped at the deadline ({killed}); " if killed else "") + f"exit {proc.returncode}: {tail[0][:300]}")
        print(f"[lane {lane}] {plan.work.name} @ {plan.budget} [{plan.strategy}]: {row['status']}: {row['error']}", flush=True)
        return row
    if reports is not None:
        reports.mkdir(parents=True, exist_ok=True)
        (reports / f"{run_dir.name}.json").write_text(json.dumps(report, indent=1))
    status = "ok" if proc.returncode == 0 else "killed" if killed else "interrupted" if proc.returncode in (130, 143, -2, -15) else "failed"
    row.update(status=status, **({} if status == "ok" else {"error": f"{status}, exit {proc.returncode}: the report is partial"}), **row_from_report(report))
    row["wall_over_budget"] = round(row["wall_s"] / plan.budget_s, 3)
    print(f"[lane {lane}] {plan.work.name} @ {plan.budget} [{plan.strategy}]: {row['answer_kind']} {_x(row['speedup'])} over eager, "
          + (f"{_x(row['speedup_vs_best_compile'])} the best compile ({row['best_compile']})" if row["speedup_vs_best_compile"] else "no compile peer")
          + f"; {row['evaluated']} candidates, first improvement at {row['first_improvement_s']} s, {row['wall_s']} s wall", flush=True)
    return row


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def read_report(run_dir: Path, stdout: str | None) -> dict | None:
    """The run folder's report.json, else the --json document the CLI printed."""
    path = run_dir / "report.json"
    for text in ([path.read_text()] if path.is_file() else []) + [stdout or ""]:
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        if isinstance(doc, dict) and ("verdict" in doc or "search" in doc):
            return doc
    return None


# ---- summary, plot, result file ---------------------------------------------------------------------


def strategy_of(row: dict) -> str:
    return row.get("strategy_asked") or DEFAULT_STRATEGY


def strategies_in(rows: list[dict]) -> list[str]:
    """The strategies the rows ran, the default first."""
    found = list(dict.fromkeys(strategy_of(r) for r in rows))
    return sorted(found, key=lambda s: s != DEFAULT_STRATEGY)


def summarize(rows: list[dict]) -> dict:
    """Per budget (and strategy, where the rows ran more than one): rows and runs that reported, the
    answer at least the fastest compile mode (within the noise), Agnitra's own recipe beating the best
    peer, the mean unused share of the budget, the original returned though a candidate passed, and
    the median ratios."""
    out = {}
    several = len(strategies_in(rows)) > 1
    for budget_s, strategy in sorted({(r["budget_s"], strategy_of(r)) for r in rows}, key=lambda bs: (bs[0], bs[1] != DEFAULT_STRATEGY, bs[1])):
        mine = [r for r in rows if r["budget_s"] == budget_s and strategy_of(r) == strategy]
        ok = [r for r in mine if r.get("status", "ok") == "ok" and "answer" in r]  # a run stopped early is no point of the curve
        compared = [r for r in ok if r.get("at_least_best_compile") is not None]
        peers = [r for r in ok if r.get("own_beats_best_peer") is not None]
        unused = [r["unused_share"] for r in ok if r.get("unused_share") is not None]
        ratios = [r["speedup_vs_best_compile"] for r in ok if r.get("speedup_vs_best_compile")]
        speedups = [r["speedup"] for r in ok if r.get("speedup") is not None]

        def names(rows_, key):
            return [r["workload"] for r in rows_ if r.get(key)]

        out[f"{budget_s:g}s" + (f" {strategy}" if several else "")] = {
            "budget_s": budget_s, **({"strategy": strategy} if several else {}), "rows": len(mine), "reported": len(ok),
            "not_reported": {r["workload"]: r.get("error") or r.get("reason") for r in mine if r not in ok},
            "answers": {k: [r["workload"] for r in ok if r["answer_kind"] == k] for k in ("own", "peer", "original")},
            "at_least_best_compile": {"count": len(names(compared, "at_least_best_compile")), "of": len(compared), "workloads": names(compared, "at_least_best_compile"),
                                      "no_compile_peer": [r["workload"] for r in ok if r not in compared]},
            "own_beats_best_peer": {"count": len(names(peers, "own_beats_best_peer")), "of": len(peers), "workloads": names(peers, "own_beats_best_peer"),
                                    "beyond_noise": names(peers, "own_beats_best_peer_beyond_noise")},
            "mean_unused_share": statistics.fmean(unused) if unused else None,
            "original_though_passed": {"count": len(names(ok, "original_though_passed")), "workloads": names(ok, "original_though_passed")},
            "median_speedup": statistics.median(speedups) if speedups else None,
            "median_speedup_vs_best_compile": statistics.median(ratios) if ratios else None,
        }
    return out


def _reported(row: dict | None) -> bool:
    return row is not None and row.get("status", "ok") == "ok" and "answer" in row


def answer_is_compile_peer(row: dict) -> bool:
    """The run's answer is a torch.compile peer (not an ONNX Runtime one, not Agnitra's own recipe)."""
    answer = str(row.get("answer") or "")
    return row.get("answer_kind") == "peer" and answer not in ORT_PEERS and not answer.startswith("onnxruntime")


def judge(challenger: dict, default: dict) -> dict:
    """`challenger`'s answer against `default`'s (two runs of one workload at one budget), by their
    speedups over their own eager baselines. The same answer is a tie. Faster: the ratio at least
    1 / WITHIN_NOISE and, where the challenger's final run gave an interval, its lower end above the
    default's speedup. At least as fast: faster, or the ratio at least WITHIN_NOISE, or the
    challenger's interval reaching the default's speedup (the file's noise rule, as `versus`). Else slower."""
    a, b = challenger.get("speedup"), default.get("speedup")
    if not a or not b:
        return {"verdict": "not compared", "ratio": None, "at_least": None, "faster": None, "judged_by": "a speedup is missing"}
    ratio = a / b
    interval = challenger.get("speedup_interval") or [None, None]
    if challenger.get("answer") == default.get("answer"):
        return {"verdict": "same answer", "ratio": ratio, "at_least": True, "faster": False, "judged_by": "the same answer"}
    faster = ratio >= 1 / WITHIN_NOISE and (interval[0] is None or interval[0] > b)
    if faster:
        how = f"ratio >= 1/{WITHIN_NOISE}" + ("" if interval[0] is None else " and the interval's low end above the default's speedup")
        return {"verdict": "faster", "ratio": ratio, "at_least": True, "faster": True, "judged_by": how}
    if ratio >= WITHIN_NOISE:
        return {"verdict": "at least as fast", "ratio": ratio, "at_least": True, "faster": False, "judged_by": f"ratio >= {WITHIN_NOISE}"}
    if interval[1] is not None and interval[1] >= b:
        return {"verdict": "at least as fast", "ratio": ratio, "at_least": True, "faster": False, "judged_by": "the interval reaches the default's speedup"}
    return {"verdict": "slower", "ratio": ratio, "at_least": False, "faster": False, "judged_by": f"ratio < {WITHIN_NOISE}, the interval below the default's speedup"}


def compare_strategies(rows: list[dict], target: float = TARGET_SHARE) -> dict:
    """Per budget, each strategy other than the default against the default, workload by workload
    (both runs reported): `judge`'s verdict, whether the default's answer was the compile peer, and
    whether the workload was held out of the agent's training (the rows' `held_out`); the share at
    least as fast against `target`, and on the held-out workloads whose default answer was the
    compile peer, which were faster. Empty where the rows ran one strategy."""
    out: dict[str, dict] = {}
    strategies = strategies_in(rows)
    if len(strategies) < 2 or strategies[0] != DEFAULT_STRATEGY:
        return out
    for budget_s in sorted({r["budget_s"] for r in rows}):
        at = [r for r in rows if r["budget_s"] == budget_s]
        defaults = {r["workload"]: r for r in at if strategy_of(r) == DEFAULT_STRATEGY}
        per_budget = {}
        for strategy in strategies[1:]:
            workloads, not_compared = {}, {}
            for r in (r for r in at if strategy_of(r) == strategy):
                d = defaults.get(r["workload"])
                if not (_reported(r) and _reported(d)):
                    not_compared[r["workload"]] = "no default row" if d is None else (r.get("error") or r.get("reason") or d.get("error") or d.get("reason") or "a run did not report")
                    continue
                verdict = judge(r, d)
                if verdict["at_least"] is None:
                    not_compared[r["workload"]] = verdict["judged_by"]
                    continue
                workloads[r["workload"]] = {
                    "held_out": r.get("held_out", d.get("held_out")), "default_answer": d["answer"], "default_answer_kind": d["answer_kind"],
                    "default_is_compile_peer": answer_is_compile_peer(d), "answer": r["answer"], "answer_kind": r["answer_kind"],
                    "default_speedup": d["speedup"], "speedup": r["speedup"], "speedup_interval": r.get("speedup_interval"), **verdict}
            for w, d in defaults.items():
                if w not in workloads and w not in not_compared:
                    not_compared[w] = f"no {strategy} row"
            at_least = [w for w, c in workloads.items() if c["at_least"]]
            share = len(at_least) / len(workloads) if workloads else None
            peer_held_out = [w for w, c in workloads.items() if c["held_out"] and c["default_is_compile_peer"]]
            faster = [w for w in peer_held_out if workloads[w]["faster"]]
            per_budget[strategy] = {
                "against": DEFAULT_STRATEGY, "workloads": workloads, "not_compared": not_compared,
                "at_least_as_fast": {"count": len(at_least), "of": len(workloads), "share": share, "target": target,
                                     "met": None if share is None else share >= target, "workloads": at_least},
                "faster": [w for w, c in workloads.items() if c["faster"]], "slower": [w for w, c in workloads.items() if not c["at_least"]],
                "held_out": [w for w, c in workloads.items() if c["held_out"]],
                "held_out_default_compile_peer": {"workloads": peer_held_out, "faster": faster,
                                                  "met": None if not peer_held_out else len(faster) == len(peer_held_out)},
            }
        out[f"{budget_s:g}s"] = per_budget
    return out


def comparison_lines(comparison: dict) -> list[str]:
    lines = []
    for key, per in comparison.items():
        for strategy, c in per.items():
            a, h = c["at_least_as_fast"], c["held_out_default_compile_peer"]
            share = "n/a" if a["share"] is None else f"{a['share']:.0%}"
            lines.append(f"budget {key}: {strategy} vs {c['against']}: at least as fast on {a['count']}/{a['of']} ({share}; target {a['target']:.0%}: "
                         f"{'met' if a['met'] else 'not met' if a['met'] is not None else 'n/a'}); faster {len(c['faster'])}, slower {len(c['slower'])}; "
                         f"held out with the compile peer as the default's answer: {len(h['faster'])}/{len(h['workloads'])} faster"
                         + (f"; not compared: {', '.join(c['not_compared'])}" if c["not_compared"] else ""))
            for w, x in c["workloads"].items():
                lines.append(f"  {w}{' (held out)' if x['held_out'] else ' (in training)' if x['held_out'] is False else ''}: {x['verdict']} ({x['ratio']:.3f}x; "
                             f"{strategy} {x['answer_kind']} {_x(x['speedup'])}, default {x['default_answer_kind']} {_x(x['default_speedup'])}"
                             f"{', the compile peer' if x['default_is_compile_peer'] else ''})")
    return lines


def summary_lines(summary: dict) -> list[str]:
    lines = []
    for key, s in summary.items():
        c, p = s["at_least_best_compile"], s["own_beats_best_peer"]
        unused = "n/a" if s["mean_unused_share"] is None else f"{s['mean_unused_share']:.0%}"
        lines.append(f"budget {key}: {s['reported']}/{s['rows']} reported; at least the fastest compile {c['count']}/{c['of']}; own recipe beats the best peer "
                     f"{p['count']}/{p['of']}; mean unused {unused}; original returned though a candidate passed {s['original_though_passed']['count']}; "
                     f"answers own {len(s['answers']['own'])}, peer {len(s['answers']['peer'])}, original {len(s['answers']['original'])}")
    return lines


def plot(rows: list[dict], path: Path) -> list[str]:
    """Speedup over eager and over the best compile mode against the budget, one line per workload:
    `path`.html (plotly, self-contained) and `path`.png where kaleido is installed. Returns what was written."""
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        return []
    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup over eager", "speedup over the fastest torch.compile mode"))
    strategies = strategies_in(rows)
    for i, workload in enumerate(dict.fromkeys(r["workload"] for r in rows)):
        for j, strategy in enumerate(strategies):
            mine = sorted((r for r in rows if r["workload"] == workload and strategy_of(r) == strategy and r.get("status", "ok") == "ok" and "answer" in r),
                          key=lambda r: r["budget_s"])
            x = [r["budget_s"] / 60 for r in mine]
            text = [f"{r['answer']} ({r['answer_kind']})" for r in mine]
            name = workload if len(strategies) == 1 else f"{workload} [{strategy}]"
            for col, key in ((1, "speedup"), (2, "speedup_vs_best_compile")):
                fig.add_trace(go.Scatter(x=x, y=[r.get(key) for r in mine], mode="lines+markers", name=name, legendgroup=name, showlegend=col == 1,
                                         text=text, line={"color": f"hsl({i * 47 % 360},65%,45%)", "dash": ("solid", "dash", "dot", "dashdot")[j % 4]}), row=1, col=col)
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray", row=1, col=2)
    fig.update_xaxes(title_text="budget (minutes)")
    fig.update_layout(title=f"agnitra optimize: the answer against the budget ({path.stem})", height=520, width=1200)
    html = path.with_suffix(".html")
    html.write_text(fig.to_html(include_plotlyjs=True, full_html=True))
    written = [str(html)]
    try:
        import kaleido  # noqa: F401

        fig.write_image(str(path.with_suffix(".png")))
        written.append(str(path.with_suffix(".png")))
    except Exception:  # noqa: BLE001 - the PNG is a nicety: kaleido absent or without its browser
        pass
    return written


def write(path: Path, device_report, conditions: dict, rows: list[dict], **extra) -> None:
    sys.path.insert(0, str(HERE))
    from result_file import write_result

    comparison = compare_strategies(rows)
    write_result(path, SCHEMA, device_report, conditions=conditions, rows=rows, summary=summarize(rows), **({"comparison": comparison} if comparison else {}), **extra)


def merge(files: list[str], out: str | None) -> Path:
    """Result files of several commands (budgets or workloads split across them) as one, summarized anew."""
    docs = [json.loads(Path(f).read_text()) for f in files]
    devices = {(d.get("device") or {}).get("name") for d in docs}
    if len(devices) > 1:
        raise SystemExit(f"the files were measured on different devices ({', '.join(sorted(map(str, devices)))}); merge one device's files")
    rows = [r for d in docs for r in d.get("rows", [])]
    path = Path(out) if out else Path(files[0]).with_name(f"{Path(files[0]).stem}-merged.json")
    doc = {**docs[0], "command": " ".join(sys.argv), "merged_from": [{"file": Path(f).name, "command": d.get("command"), "conditions": d.get("conditions")} for f, d in zip(files, docs)],
           "rows": rows, "summary": summarize(rows)}
    comparison = compare_strategies(rows)
    if comparison:
        doc["comparison"] = comparison
    else:
        doc.pop("comparison", None)
    doc["plots"] = plot(rows, path)
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


def parse_strategies(text: str) -> list[str]:
    """'default,ppo' -> ['default', 'ppo'] (the default first, each once)."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if not re.fullmatch(r"[a-z][a-z0-9_-]*", n)]
    if not names or bad:
        raise SystemExit(f"bad --strategies {text!r}: comma-separated strategy names, e.g. default,ppo ({DEFAULT_STRATEGY}: the CLI's own)")
    return sorted(names, key=lambda n: n != DEFAULT_STRATEGY)


def held_out_map(workloads: list[str], given: str | None, records: dict[str, dict], device: str) -> tuple[dict[str, bool], str]:
    """Each workload held out of the agent's training or not, and how that was decided: --held-out
    (names; 'none'), else the policies' training workloads ({} where neither says)."""
    if given is not None:
        named = set() if given.strip() == "none" else {n.strip() for n in given.split(",") if n.strip()}
        unknown = named - set(workloads)
        if unknown:
            raise SystemExit(f"--held-out names {', '.join(sorted(unknown))}, not among --workloads")
        return {w: w in named for w in workloads}, "--held-out"
    training = trained_on(records, device)
    if training is None:
        return {}, ""
    return {w: held_out_of(w, training) for w in workloads}, "the policies' training_workloads: a workload whose name (a family's `FAMILY-...`) is among them at any batch is in training"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--budgets", default=DEFAULT_BUDGETS, help=f"comma-separated, e.g. 2m,5m (default {DEFAULT_BUDGETS})")
    parser.add_argument("--workloads", default=None, help="comma-separated zoo:NAME[@bN] and hf:FAMILY[@bN] (hf:all: the twelve); "
                        f"default on cuda {GPU_DEFAULT},hf:all; on cpu {CPU_DEFAULT},hf:all")
    parser.add_argument("--size", choices=SIZES, default=None, help="the hf families' size (default: base on cuda, small on cpu)")
    parser.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default=None, help="every workload's --dtype (default: fp16, bf16 for decoders, on cuda; fp32 on cpu)")
    parser.add_argument("--lanes", type=int, default=None, help="processes side by side, one GPU each (default: every GPU on cuda, 1 on cpu)")
    parser.add_argument("--deadline-s", type=float, default=None, help="the whole command's limit: rows that would end after it are skipped")
    parser.add_argument("--warm-caches", action="store_true", help="one Inductor/Triton cache per lane, kept between runs (default: each run starts with empty ones)")
    parser.add_argument("--out", default=None, help="the result file (default benchmarks/results/budget-curve-<device>-<date>.json); the plot beside it")
    parser.add_argument("--runs", default=None, help="where the run folders go (default /tmp/agnitra-budget-curve/<time>)")
    parser.add_argument("--copy-reports", default=None, help="a folder to copy each run's report.json into")
    parser.add_argument("--strategies", default=DEFAULT_STRATEGY, help="comma-separated search strategies, each row run once per strategy under the same conditions "
                        f"(`{DEFAULT_STRATEGY}`: the CLI's own, no --strategy flag; e.g. default,ppo); the others are compared with the default in `comparison`")
    parser.add_argument("--agent-dir", default=None, help="the agent's policies (`<class>/policy-NNNN.{pt,json}`, as `agnitra agent train` writes under <cache>/agent): "
                        "each run's cache holds a copy, so --strategy ppo plays them")
    parser.add_argument("--held-out", default=None, help="comma-separated workloads (as in --workloads) held out of the agent's training; 'none' for none "
                        "(default: read off the --agent-dir policies' training_workloads)")
    parser.add_argument("--merge", nargs="+", metavar="FILE", help="merge result files into --out, summarized and plotted anew (nothing run)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    if args.merge:
        path = merge(args.merge, args.out)
        doc = json.loads(path.read_text())
        print("\n".join(summary_lines(doc["summary"]) + comparison_lines(doc.get("comparison") or {})))
        print(f"wrote {path}")
        return 0
    started = time.monotonic()
    deadline = started + (args.deadline_s if args.deadline_s else float("inf"))
    size = args.size or ("base" if args.device == "cuda" else "small")
    budgets = parse_budgets(args.budgets)
    hf_families = families()
    names = [n.strip() for n in (args.workloads or f"{GPU_DEFAULT if args.device == 'cuda' else CPU_DEFAULT},hf:all").split(",") if n.strip()]
    names = [x for n in names for x in ([f"hf:{f}" for f in hf_families.FAMILIES] if n == "hf:all" else [n])]
    works = [parse_workload(n, args.device, size, args.dtype) for n in names]
    strategies = parse_strategies(args.strategies)
    agent = agent_folder(Path(args.agent_dir)) if args.agent_dir else None
    records = agent_records(agent) if agent else {}
    held_out, held_out_how = held_out_map([w.name for w in works], args.held_out, records, args.device)
    # one workload's strategies side by side in the order: a deadline that cuts the list cuts whole comparisons last
    plans = [Plan(w, text, seconds, strategy, agent) for text, seconds in budgets for w in works for strategy in strategies]
    runs = Path(args.runs or f"/tmp/agnitra-budget-curve/{dt.datetime.now():%Y%m%d-%H%M%S}")
    if args.dry_run:
        for plan in plans:
            print(shlex.join(command_of(plan, args.device, runs / run_name(plan))))
        if held_out:
            print("held out: " + ", ".join(w for w, h in held_out.items() if h) + f" ({held_out_how})")
        return 0
    import torch

    from agnitra import api

    if args.device == "cuda":
        visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g] or [str(i) for i in range(torch.cuda.device_count())]
        lanes = visible[: args.lanes or len(visible)]
        if not lanes:
            raise SystemExit("--device cuda: no GPU visible")
    else:
        lanes = [None] * (args.lanes or 1)
    device_report = api.describe_device(torch.device(args.device))
    name = slug(device_report.name) if args.device == "cuda" else "cpu"
    path = Path(args.out or HERE / "results" / f"budget-curve-{name}-{dt.date.today().isoformat()}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    runs.mkdir(parents=True, exist_ok=True)
    try:
        store = hf_families.snapshot_store(runs)
        store_note = "a fresh copy a run of the store as it was at the start" if store else "the configured store (not a SQLite file: runs may learn from earlier ones)"
    except Exception as exc:  # noqa: BLE001 - no store here (sqlalchemy absent, a bad URL): the runs say what they did without one
        store, store_note = None, f"not copied ({type(exc).__name__}: {exc}); each run uses the configured store as it finds it"
    conditions = {
        "device": args.device, "lanes": len(lanes), "gpus": [g for g in lanes if g is not None], "budgets": [b for b, _ in budgets],
        "workloads": {w.name: shlex.join([w.spec, *w.flags]) for w in works}, "hf_size": size,
        "hf_dims(hidden,layers,heads,ffn)": {f: BASE_OF.get(f, BASE[family_kind(f)]) if size == "base" else hf_families.SIZES[size][:4]
                                             for f in hf_families.FAMILIES if f"hf:{f}" in {w.name.partition('@')[0] for w in works}},
        "hf_serving_shapes(batch,seq or image side)": SERVE if size == "base" else "batch as SERVE, the preset's sequence; vision: the preset's image",
        "weights": "zoo: as the zoo builds them (minilm real, the rest random); hf: random (seeded) from configs, nothing downloaded",
        "flags": "the CLI's defaults but the workload's size flags, --dtype (cuda: fp16, bf16 for decoders), --budget, --out (a fresh folder a run), --json",
        "store": store_note,
        "compile_caches": "one Inductor/Triton cache per lane, kept between runs" if args.warm_caches else "each run with empty Inductor and Triton caches (a first run)",
        "deadline_s": args.deadline_s, "expected_wall": f"budget x {WALL_FACTOR} + {START_S:.0f} s (rows that would end after the deadline are skipped)",
        "within_noise": f"the answer's final-run speedup interval reaches the best compile mode's speedup; without one, ratio >= {WITHIN_NOISE}",
        "torch": torch.__version__, "runs": str(runs),
    }
    if strategies != [DEFAULT_STRATEGY]:
        conditions["strategies"] = strategies
        conditions["comparison"] = (f"per budget and workload, each strategy's answer against the default's (`{DEFAULT_STRATEGY}`: no --strategy flag), by speedup over "
                                    f"each run's own eager baseline: faster at ratio >= 1/{WITHIN_NOISE} (and the interval's low end above the default's speedup "
                                    f"where the final run gave one), at least as fast at ratio >= {WITHIN_NOISE} or the interval reaching it, the same answer a tie; "
                                    f"target: at least as fast on {TARGET_SHARE:.0%} of the workloads, and faster on the held-out ones whose default answer is the compile peer")
    if agent:
        conditions["agent"] = {"dir": str(agent), "policies": records, "how": "each run's AGNITRA_CACHE_DIR a folder of its own: `agent` a copy of the policies, "
                               "the configured cache's other entries linked"}
    if held_out:
        conditions["held_out"] = {"workloads": [w for w, h in held_out.items() if h], "in_training": [w for w, h in held_out.items() if not h], "how": held_out_how}
    rows: list[dict] = []
    lock = threading.Lock()

    def on_row(row: dict) -> None:
        if row["workload"] in held_out:
            row["held_out"] = held_out[row["workload"]]
        with lock:
            rows.append(row)
            write(path, device_report, conditions, rows)

    print(f"{len(plans)} runs on {len(lanes)} lane(s); runs under {runs}; result {path}", flush=True)
    write(path, device_report, conditions, rows)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` ends the command: its runs end with it
    try:
        Runner(plans, args.device, lanes, runs, deadline, store, args.warm_caches, Path(args.copy_reports) if args.copy_reports else None, on_row).run()
    except BaseException:
        stop_all()
        with lock:
            write(path, device_report, conditions, rows, interrupted=True, wall_s=round(time.monotonic() - started, 1))
        raise
    order = {(p.work.name, p.budget_s, p.strategy): i for i, p in enumerate(plans)}
    rows.sort(key=lambda r: order.get((r["workload"], r["budget_s"], strategy_of(r)), 0))
    plots = plot(rows, path)
    write(path, device_report, conditions, rows, plots=plots, wall_s=round(time.monotonic() - started, 1))
    print("\n".join(summary_lines(summarize(rows)) + comparison_lines(compare_strategies(rows))))
    print(f"wrote {path}" + (f" and {', '.join(plots)}" if plots else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

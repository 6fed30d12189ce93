"""Which transforms recognise real models: twelve transformers families (and a BatchNorm convnet)
built from their configs with seeded random weights.

    PYTHONPATH=src python benchmarks/hf_families.py --size small
    PYTHONPATH=src python benchmarks/hf_families.py --size small --optimize distilbert,mistral --budget 2m
    PYTHONPATH=src python benchmarks/hf_families.py --size moderate --device cuda --dtype fp16 --strategy model --families "" --optimize all --budget 75s --out-file /tmp/out/hf-families.json
    PYTHONPATH=src python benchmarks/hf_families.py --merge A.json B.json --out-file merged.json

For each family: the stackable projection groups found by structure (`transforms.structure`),
whether the stacked model computes the same (fp32, max relative error), the transforms of the
search space that apply on this device and why the others do not (`search.space.recipe_space`).
With --optimize (all: the twelve), `agnitra.optimize` at the default tolerances (--dtype, --strategy,
--peers passed on), each family against a fresh copy of the store as it was at the start (a SQLite
store; --shared-store: the store itself), so no family's cost model learns from another: its answer
(Agnitra's own recipe, a peer's, or the original model) against the fastest torch.compile peer that
passed verification in the same final run (ratio of medians, and beyond the noise), every candidate
with its outcome and time, and the share of the candidate time spent on candidates that did not pass.
A summary (also printed) holds issue 39's figures against its targets; the store's census says what
the cost model learned from. A family that fails is kept as a row with its reason; the file is
rewritten after each family. Writes benchmarks/results/hf-families-<device>-<date>.json (or --out-file);
--merge joins the files of several commands and summarizes them anew.

tests/test_hf_families.py builds the same families at size "tiny" and checks the summary's arithmetic.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

# sizes: (hidden, layers, heads, ffn, sequence / image side)
SIZES = {"tiny": (32, 2, 4, 64, 16), "small": (128, 2, 4, 512, 64), "moderate": (512, 4, 8, 2048, 128)}


class Main(nn.Module):
    """A transformers model called with keyword inputs, its main tensor out (last hidden state)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], extra: dict | None = None, field: str = "last_hidden_state") -> None:
        super().__init__()
        self.model, self.names, self.extra, self.field = model, names, dict(extra or {}), field

    def forward(self, *inputs):
        out = self.model(**dict(zip(self.names, inputs)), **self.extra)
        return out[self.field] if not isinstance(out, torch.Tensor) else out


@dataclass
class Family:
    name: str
    build: Callable[[tuple], tuple[nn.Module, tuple]]  # size -> (model, example inputs)
    # what fuse-projections should find, per decoder/encoder layer count L (tests assert it)
    expect: Callable[[int], list[tuple[int, int]]]  # [(group size, how many groups)]


def _ids(vocab: int, seq: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _gpt2(s):
    from transformers import GPT2Config, GPT2Model

    d, n, h, f, seq = s
    return Main(GPT2Model(GPT2Config(vocab_size=256, n_embd=d, n_layer=n, n_head=h, n_inner=f, n_positions=seq * 2)), ("input_ids",), {"use_cache": False}), (_ids(256, seq),)


def _distilbert(s):
    from transformers import DistilBertConfig, DistilBertModel

    d, n, h, f, seq = s
    return Main(DistilBertModel(DistilBertConfig(vocab_size=256, dim=d, n_layers=n, n_heads=h, hidden_dim=f, max_position_embeddings=seq * 2)), ("input_ids",)), (_ids(256, seq),)


def _roberta(s):
    from transformers import RobertaConfig, RobertaModel

    d, n, h, f, seq = s
    config = RobertaConfig(vocab_size=256, hidden_size=d, num_hidden_layers=n, num_attention_heads=h, intermediate_size=f, max_position_embeddings=seq * 2 + 2)
    return Main(RobertaModel(config, add_pooling_layer=False), ("input_ids",)), (_ids(256, seq),)


def _t5(s):
    from transformers import T5Config, T5Model

    d, n, h, f, seq = s
    config = T5Config(vocab_size=256, d_model=d, d_kv=d // h, d_ff=f, num_layers=n, num_decoder_layers=n, num_heads=h, decoder_start_token_id=0)
    return Main(T5Model(config), ("input_ids", "decoder_input_ids"), {"use_cache": False}), (_ids(256, seq), _ids(256, seq // 2, seed=1))


def _vit(s):
    from transformers import ViTConfig, ViTModel

    d, n, h, f, seq = s
    side = 32 if seq <= 16 else 64
    config = ViTConfig(hidden_size=d, num_hidden_layers=n, num_attention_heads=h, intermediate_size=f, image_size=side, patch_size=8)
    return Main(ViTModel(config, add_pooling_layer=False), ("pixel_values",)), (torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(0)),)


def _clip_text(s):
    from transformers import CLIPTextConfig, CLIPTextModel

    d, n, h, f, seq = s
    config = CLIPTextConfig(vocab_size=256, hidden_size=d, intermediate_size=f, num_hidden_layers=n, num_attention_heads=h, max_position_embeddings=seq * 2)
    return Main(CLIPTextModel(config), ("input_ids",)), (_ids(256, seq),)


def _wav2vec2(s):
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    d, n, h, f, seq = s
    config = Wav2Vec2Config(hidden_size=d, num_hidden_layers=n, num_attention_heads=h, intermediate_size=f, conv_dim=(32, 32), conv_stride=(5, 2),
                            conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, mask_time_prob=0.0)
    audio = torch.randn(1, 40 * seq, generator=torch.Generator().manual_seed(0))
    return Main(Wav2Vec2Model(config), ("input_values",)), (audio,)


def _whisper_encoder(s):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    d, n, h, f, seq = s
    config = WhisperConfig(num_mel_bins=16, d_model=d, encoder_layers=n, encoder_attention_heads=h, encoder_ffn_dim=f, max_source_positions=seq)
    return Main(WhisperEncoder(config), ("input_features",)), (torch.randn(1, 16, 2 * seq, generator=torch.Generator().manual_seed(0)),)


def _bart(s):
    from transformers import BartConfig, BartModel

    d, n, h, f, seq = s
    config = BartConfig(vocab_size=256, d_model=d, encoder_layers=n, decoder_layers=n, encoder_attention_heads=h, decoder_attention_heads=h,
                        encoder_ffn_dim=f, decoder_ffn_dim=f, max_position_embeddings=seq * 2)
    return Main(BartModel(config), ("input_ids", "decoder_input_ids"), {"use_cache": False}), (_ids(256, seq), _ids(256, seq // 2, seed=1))


def _opt(s):
    from transformers import OPTConfig, OPTModel

    d, n, h, f, seq = s
    config = OPTConfig(vocab_size=256, hidden_size=d, num_hidden_layers=n, ffn_dim=f, num_attention_heads=h, max_position_embeddings=seq * 2, word_embed_proj_dim=d)
    return Main(OPTModel(config), ("input_ids",), {"use_cache": False}), (_ids(256, seq),)


def _mistral(s):
    from transformers import MistralConfig, MistralModel

    d, n, h, f, seq = s
    config = MistralConfig(vocab_size=256, hidden_size=d, intermediate_size=f, num_hidden_layers=n, num_attention_heads=h, num_key_value_heads=h // 2,
                           head_dim=d // h, max_position_embeddings=seq * 2, sliding_window=None)
    return Main(MistralModel(config), ("input_ids",), {"use_cache": False}), (_ids(256, seq),)


class ConvNet(nn.Module):
    """conv-BN-ReLU x 3, global pooling, one Linear head: nothing to stack."""

    def __init__(self, width: int, classes: int = 10) -> None:
        super().__init__()
        layers, c = [], 3
        for i in range(3):
            layers += [nn.Conv2d(c, width * 2**i, 3, padding=1, bias=False), nn.BatchNorm2d(width * 2**i), nn.ReLU()]
            c = width * 2**i
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.features(x))


def _convnet(s):
    d, _, _, _, seq = s
    model = ConvNet(max(8, d // 8))
    for m in model.modules():  # running statistics not the identity: folding them would show
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)),)


def _qkv(layers: int) -> list[tuple[int, int]]:
    return [(3, layers)]


FAMILIES = {f.name: f for f in [
    Family("gpt2", _gpt2, lambda n: []),  # c_attn is already one stacked projection
    Family("distilbert", _distilbert, _qkv),
    Family("roberta", _roberta, _qkv),  # transformers 5: the BERT-family path (StackedSelfAttention)
    # encoder and decoder self-attention q|k|v; cross-attention k|v of all decoder layers read the encoder output
    Family("t5", _t5, lambda n: [(3, 2 * n), (2 * n, 1)]),
    Family("vit", _vit, _qkv),
    Family("clip-text", _clip_text, _qkv),
    Family("wav2vec2", _wav2vec2, _qkv),
    Family("whisper-encoder", _whisper_encoder, _qkv),
    Family("bart", _bart, lambda n: [(3, 2 * n), (2 * n, 1)]),
    Family("opt", _opt, _qkv),
    Family("mistral", _mistral, lambda n: [(3, n), (2, n)]),  # q|k|v and gate|up
    Family("convnet", _convnet, lambda n: []),
]}


def build(name: str, size: str = "tiny"):
    """A Workload of family `name` at `size` (seeded random weights, eval mode)."""
    from agnitra.workloads.base import Workload

    torch.manual_seed(0)
    model, inputs = FAMILIES[name].build(SIZES[size])
    task = "classifier" if name == "convnet" else "encoder"
    return Workload(name=f"{name}-{size}", model=model.eval(), example_inputs=inputs, task=task, weights="random", source=f"hf-families:{name}", batch=inputs[0].shape[0])


def group_shapes(groups) -> list[tuple[int, int]]:
    """[(group size, how many groups of that size)], sorted: what `Family.expect` states."""
    from collections import Counter

    return sorted(Counter(len(g) for g in groups).items(), key=lambda kv: (-kv[0], kv[1]))


def group_shapes_of(expected: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`Family.expect`'s list in `group_shapes`' order."""
    return sorted(expected, key=lambda kv: (-kv[0], kv[1]))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def survey(name: str, size: str, device: torch.device) -> dict:
    """Groups found, the stacked model checked against the original, the space on this device."""
    from agnitra.errors import NotApplicable
    from agnitra.search.space import recipe_space
    from agnitra.transforms import Recipe, TransformContext, get_transform
    from agnitra.transforms.patcher import apply_recipe
    from agnitra.transforms.structure import find_projection_groups

    workload = build(name, size)
    workload.model.to(device)
    workload.example_inputs = tuple(t.to(device) for t in workload.example_inputs)
    ctx = TransformContext(workload, device)
    row: dict = {"family": name, "size": size, "params": workload.param_count()}
    started = time.perf_counter()
    detection = find_projection_groups(workload.model, workload.example_inputs)
    row["detect_s"] = round(time.perf_counter() - started, 3)
    row["projection_groups"] = [list(g) for g in detection.groups]
    row["group_shapes"] = group_shapes(detection.groups)
    fuse = get_transform("fuse-projections")
    try:
        fuse.check(ctx, None)
        patched = apply_recipe(Recipe.of("fuse-projections"), ctx)
        with torch.no_grad():
            row["fuse_projections"] = {"applies": True, "notes": patched.notes,
                                       "rel_error": _rel(patched.model(*workload.example_inputs), workload.model(*workload.example_inputs))}
    except NotApplicable as exc:
        row["fuse_projections"] = {"applies": False, "reason": str(exc)}
    ranked, skipped = recipe_space(ctx)
    row["space"] = {"candidates": len(ranked), "first": [c.recipe.name for c in ranked[:8]],
                    "applicable": sorted({s.transform for c in ranked for s in c.recipe.steps}),
                    "skipped": sorted({f"{s.transform}: {s.reason}" for s in skipped})}
    return row


# ---- optimize on each family: where the search's time went, and the answer against torch.compile ----

TARGET_FAILING_SHARE = 0.20  # issue 39: candidates that do not pass take at most this share of the search time
TARGET_OWN_WINS = 0.80  # issue 39: Agnitra's own recipe beats the best torch.compile mode on at least this share
OUTCOMES = ("passed", "failed verification", "failed", "timeout", "skipped")
CANDIDATE_STARTED = re.compile(r"^candidate \d+: ")  # the search loop's progress message (search.tuner)
SEARCH_OVER = "final interleaved run"  # optimize's progress message after the search loop
SHOWN = ("measuring the", "candidate ", SEARCH_OVER, "building the answer")  # progress printed as it happens
TRAINED = re.compile(r"cost model trained on (\d+) measurements of (\d+) stored run")
TIME_MEASURES = {
    "slot_s": "each candidate's wall time in the search loop, from its start to the next candidate's (or the final run's): its worker call, "
              "a worker restart after it was killed, and the strategy's retraining on its result",
    "eval_s": "each candidate's own run as the report records it (in the worker; for a killed one, until it was stopped); "
              "worker restarts and the strategy's own time not counted",
}


def outcome(candidate: dict) -> str:
    """What became of one candidate of a report: passed | failed verification | failed | timeout | skipped."""
    status = candidate["status"]
    if status == "ok":
        return "passed" if candidate.get("passed") else "failed verification"
    return status if status in OUTCOMES else "failed"


def candidate_slots(events: list[tuple[float, str]], count: int, ended: float) -> list[float] | None:
    """Each candidate's wall time in the search loop from the run's progress messages (time, message):
    from its start to the next candidate's start, the last one's to the final run's (or `ended`). None
    where the messages do not name `count` candidates (the report's; a resumed run reuses some)."""
    starts = [t for t, message in events if CANDIDATE_STARTED.match(message)]
    if len(starts) != count:
        return None
    if not starts:
        return []
    stop = next((t for t, message in events if t >= starts[-1] and message.startswith(SEARCH_OVER)), ended)
    return [round(b - a, 3) for a, b in zip(starts, starts[1:] + [stop])]


def candidate_time(candidates: list[dict]) -> dict:
    """The search's candidate time by outcome; failing: every candidate that did not pass verification
    (failed it, raised, ran past its limit or did not apply). Measured by `slot_s` where every
    candidate has one, else by `eval_s` (TIME_MEASURES says what each counts)."""
    measure = "slot_s" if all(c.get("slot_s") is not None for c in candidates) else "eval_s"
    counts = {o: sum(1 for c in candidates if c["outcome"] == o) for o in OUTCOMES}

    def split(key: str) -> tuple[dict, float, float]:
        seconds = {o: sum(c.get(key) or 0.0 for c in candidates if c["outcome"] == o) for o in OUTCOMES}
        total = sum(seconds.values())
        return seconds, total, total - seconds["passed"]

    seconds, total, failing = split(measure)
    _, own_total, own_failing = split("eval_s")  # beside it: the candidates' own runs alone
    return {"measure": measure, "total_s": round(total, 2), "failing_s": round(failing, 2), "failing_share": failing / total if total else None,
            "measured": len(candidates), "failing": len(candidates) - counts["passed"],
            "seconds": {k: round(v, 2) for k, v in seconds.items()}, "counts": counts,
            "eval_s": {"total_s": round(own_total, 2), "failing_s": round(own_failing, 2), "failing_share": own_failing / own_total if own_total else None}}


def versus_compile(report) -> dict:
    """Whose answer it is (Agnitra's own recipe, a peer's, or the original model) and Agnitra's best
    recipe of the final run against the fastest torch.compile peer that passed verification there:
    the ratio of medians and the paired-rounds interval (`bench.noise`: beyond the noise where its low
    end clears 1.01). A win needs the answer itself to be Agnitra's own recipe."""
    from agnitra.bench.noise import faster_beyond_noise

    peers = set(report.search["peers"])
    ok = [v for v in report.bench.variants[1:] if v.status == "ok" and v.latency_ms and (v.correctness is None or v.correctness.passed)]
    compile_peers = [v for v in ok if v.name in peers and v.name.startswith("compile")]
    own = [v for v in ok if v.name not in peers]
    answer = "baseline" if report.chosen is None else "peer" if report.chosen in peers else "own"
    best_peer = min(compile_peers, key=lambda v: v.latency_ms.median, default=None)
    mine = next((v for v in own if v.name == report.chosen), None) if answer == "own" else min(own, key=lambda v: v.latency_ms.median, default=None)
    steps = (report.recipe or {}).get("steps", []) if answer == "own" else []
    out: dict = {"answer": answer, "own_recipe": answer == "own", "peers": sorted(peers),
                 # an answer that is torch.compile with other options than the peers' (and nothing else) is said apart
                 "own_transforms": [s["transform"] for s in steps], "own_is_compile_options_alone": bool(steps) and {s["transform"] for s in steps} == {"compile"},
                 "best_compile_peer": best_peer and best_peer.name, "best_compile_peer_ms": best_peer and best_peer.latency_ms.median,
                 "best_own": mine and mine.name, "best_own_ms": mine and mine.latency_ms.median,
                 "own_vs_best_compile": None, "own_vs_best_compile_interval": None, "own_beats_best_compile": False, "own_beats_best_compile_beyond_noise": False}
    if best_peer is not None and mine is not None:
        ratio = best_peer.latency_ms.median / mine.latency_ms.median
        verdict = faster_beyond_noise(best_peer.round_ms, mine.round_ms)
        out.update(own_vs_best_compile=ratio, own_vs_best_compile_interval=None if math.isnan(verdict.low) else verdict.interval(),
                   own_beats_best_compile=answer == "own" and ratio > 1, own_beats_best_compile_beyond_noise=answer == "own" and verdict.faster)
    return out


def trained_on(notes: list[str]) -> dict:
    """What the search notes say the cost model learned from (the model and auto strategies), and the warm start."""
    found = next((m for m in map(TRAINED.search, notes) if m), None)
    return {"cost_model_trained_on": int(found.group(1)) if found else None, "cost_model_stored_runs": int(found.group(2)) if found else None,
            "strategy_notes": [n for n in notes if n.startswith(("model:", "auto:", "warm start:"))]}


def optimize_row(name: str, size: str, device: str, budget: str, out: Path, transforms: list[str] | None = None, **options) -> dict:
    """`agnitra.optimize` on one family (`options`: dtype, strategy, peers, candidate_timeout, as the api takes them)."""
    from agnitra import api
    from agnitra.results import quality_error

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from optimize import versus_peers

    workload = build(name, size)
    events: list[tuple[float, str]] = []
    started = time.perf_counter()

    def progress(message: str, fraction: float) -> None:
        events.append((time.perf_counter(), message))
        if message.startswith(SHOWN):
            print(f"  [{events[-1][0] - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    options = {k: v for k, v in options.items() if v is not None}
    run = out / "-".join([name, size, options.get("dtype", "fp32"), options.get("strategy", "default")] + (transforms or []))
    report = api.optimize(workload, device=device, budget=budget, out=run, transforms=transforms, progress=progress, **options).report
    ended = time.perf_counter()
    slots = candidate_slots(events, len(report.candidates), ended)
    candidates = []
    for i, c in enumerate(report.candidates):
        row = {"name": c.name, "status": c.status, "passed": c.passed, "reason": (c.reason or "")[:200], "setup_s": c.setup_s, "build_s": c.build_s, "eval_s": c.eval_s,
               "slot_s": slots[i] if slots else None, "speedup": c.speedup, "predicted": c.predicted,
               "quality_error": quality_error(c.correctness.metric, c.correctness.value) if c.correctness and c.correctness.value is not None else None}
        candidates.append(dict(row, outcome=outcome(row)))
    # every variant of the final run with its correctness: a peer outside the tolerances the candidates
    # were held to (onnxruntime-int8 on random weights) is no fair best peer
    final = [{"name": v.name, "status": v.status, "median_ms": v.latency_ms.median if v.latency_ms else None,
              "passed": None if v.correctness is None else v.correctness.passed,
              "error": None if v.correctness is None else v.correctness.value} for v in report.bench.variants]
    peers = [v for v in final if v["name"] in report.search["peers"] and v["median_ms"] and v["passed"] is not False]
    best = min(peers, key=lambda v: v["median_ms"]) if peers else None
    headline = versus_peers(report)
    notes = report.search.get("notes", [])
    search = {k: report.search.get(k) for k in ("strategy", "budget_s", "elapsed_s", "space_size", "evaluated", "unmeasured", "worker_starts", "finalists", "time_s", "reserved_for_final_s")}
    return {"family": name, "size": size, "status": "ok", "dtype": options.get("dtype", "fp32 (as built)"), "budget": budget, "transforms": transforms or "all",
            "wall_s": round(ended - started, 1), **search, **headline, **versus_compile(report),
            "best_passing_peer": best and best["name"], "best_passing_peer_ms": best and best["median_ms"],
            "speedup_vs_best_passing_peer": best["median_ms"] / headline["median_ms"] if best and headline.get("median_ms") else None,
            "candidate_time": candidate_time(candidates), **trained_on(notes), "verdict": report.verdict,
            "final_run": final, "candidates": candidates, "notes": notes}


def failed_row(name: str, size: str, stage: str, exc: BaseException, wall_s: float) -> dict:
    """A family whose build or optimize failed: kept, with its one-line reason."""
    from agnitra.errors import first_line

    return {"family": name, "size": size, "status": "failed", "stage": stage, "error": first_line(exc), "wall_s": round(wall_s, 1)}


def summarize(rows: list[dict]) -> dict:
    """Issue 39's two figures over the optimized families (the last row of each family counts): the
    share of families where Agnitra's own recipe beats the best torch.compile peer (a family that
    failed counts as no win), and the share of candidate time spent on candidates that did not pass,
    over all families (their seconds summed) and per family."""
    latest = {r["family"]: r for r in rows}
    ran = list(latest.values())
    ok = [r for r in ran if r.get("status", "ok") == "ok"]
    wins = [r["family"] for r in ok if r.get("own_beats_best_compile")]
    sure = [r["family"] for r in ok if r.get("own_beats_best_compile_beyond_noise")]
    times = {r["family"]: r["candidate_time"] for r in ok if r.get("candidate_time")}
    failing, total = sum(t["failing_s"] for t in times.values()), sum(t["total_s"] for t in times.values())
    share = failing / total if total else None
    wrong = sum(t["seconds"].get("failed verification", 0.0) for t in times.values())  # the measure: outputs that failed verification
    wrong_share = wrong / total if total else None

    def part(names: list[str]) -> dict:
        alone = [r["family"] for r in ok if r["family"] in names and r.get("own_is_compile_options_alone")]
        return {"count": len(names), "share": len(names) / len(ran) if ran else None, "met": bool(ran) and len(names) / len(ran) >= TARGET_OWN_WINS, "families": names,
                "by_compile_options_alone": alone}

    return {
        "families": len(ran), "superseded_rows": len(rows) - len(ran), "optimized": len(ok),
        "failed": {r["family"]: r.get("error") for r in ran if r not in ok},
        "answers": {kind: [r["family"] for r in ok if r.get("answer") == kind] for kind in ("own", "peer", "baseline")},
        "measured": sum(r.get("evaluated") or 0 for r in ok),
        "own_beats_best_compile": {"target": f">= {TARGET_OWN_WINS:.0%} of the families run", "by_median": part(wins), "beyond_noise": part(sure),
                                   "no_compile_peer": [r["family"] for r in ok if not r.get("best_compile_peer")]},
        "failing_candidate_time": {"target": f"<= {TARGET_FAILING_SHARE:.0%} of the candidate time", "failing_s": round(failing, 2), "total_s": round(total, 2),
                                   "share": share, "met": share is not None and share <= TARGET_FAILING_SHARE,
                                   "measures": sorted({t["measure"] for t in times.values()}),
                                   "per_family": {name: {k: t[k] for k in ("failing_share", "failing_s", "total_s", "measured", "failing")} for name, t in times.items()}},
        "failed_verification_time": {"target": f"<= {TARGET_FAILING_SHARE:.0%} of the candidate time", "seconds": round(wrong, 2), "total_s": round(total, 2),
                                     "share": wrong_share, "met": wrong_share is not None and wrong_share <= TARGET_FAILING_SHARE,
                                     "per_family": {name: round(t["seconds"].get("failed verification", 0.0), 2) for name, t in times.items()}},
        "cost_model_trained_on": {r["family"]: r.get("cost_model_trained_on") for r in ok},
    }


def summary_lines(summary: dict) -> list[str]:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.0%}"

    wins, time_ = summary["own_beats_best_compile"], summary["failing_candidate_time"]
    n = summary["families"]
    lines = [f"summary: {n} families run, {summary['optimized']} optimized, {summary['measured']} candidates measured; answers: "
             + ", ".join(f"{kind} {len(names)}" for kind, names in summary["answers"].items()) + (f", failed {len(summary['failed'])}" if summary["failed"] else ""),
             f"  own recipe beats the best torch.compile peer: {wins['by_median']['count']}/{n} ({pct(wins['by_median']['share'])}) by median, "
             f"{wins['beyond_noise']['count']}/{n} ({pct(wins['beyond_noise']['share'])}) beyond the noise; target {wins['target']}: "
             f"{'met' if wins['by_median']['met'] else 'not met'} by median, {'met' if wins['beyond_noise']['met'] else 'not met'} beyond the noise"
             + (f" (by torch.compile options alone: {', '.join(wins['by_median']['by_compile_options_alone'])})" if wins["by_median"]["by_compile_options_alone"] else ""),
             f"  candidate time on candidates that did not pass: {time_['failing_s']:.1f} of {time_['total_s']:.1f} s ({pct(time_['share'])}); "
             f"target {time_['target']}: {'met' if time_['met'] else 'not met'} ({', '.join(time_['measures']) or 'nothing measured'})"]
    lines += [f"    {name:16s} {pct(t['failing_share']):>4s}  {t['failing_s']:.1f} of {t['total_s']:.1f} s, {t['failing']} of {t['measured']} candidates did not pass"
              for name, t in time_["per_family"].items()]
    wrong = summary.get("failed_verification_time")
    if wrong:
        lines.append(f"  of it on outputs that failed verification (the rest: timeouts, setups that failed): {wrong['seconds']:.1f} s ({pct(wrong['share'])}); "
                     f"target {wrong['target']}: {'met' if wrong['met'] else 'not met'}")
    lines += [f"    {name:16s} failed: {why}" for name, why in summary["failed"].items()]
    trained = sorted({v for v in summary["cost_model_trained_on"].values() if v is not None})
    lines.append("  cost model trained on " + (", ".join(map(str, trained)) + " stored measurements" if trained else "nothing from the store (see strategy_notes)"))
    return lines


# ---- the store: what the cost model learned from, and each family searched against it as it was -----


def store_census(device_kind: str) -> dict:
    """The configured store (AGNITRA_DB_URL, else the cache dir's SQLite): its measurements on this kind
    of device by workload family, and how many are of these families (a held-out family has none)."""
    from collections import Counter

    from agnitra.errors import first_line
    from agnitra.search.costmodel.dataset import load_rows
    from agnitra.search.costmodel.model import timed
    from agnitra.store import open_store
    from agnitra.store.db import safe_url, store_url

    url = store_url()
    try:
        store = open_store(url)
        try:
            rows = load_rows(store, device_kind=device_kind)
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - said in the result; the strategies say what they did without it
        return {"url": safe_url(url), "error": first_line(exc)}
    ours = [r for r in rows if (r.get("source") or "").startswith("hf-families:") or (r.get("workload") or "").rsplit("-", 1)[0] in FAMILIES]
    return {"url": safe_url(url), "device_kind": device_kind, "rows": len(rows), "timed": sum(1 for r in rows if timed(r)), "runs": len({r.get("run_id") for r in rows}),
            "by_family": dict(Counter(r.get("family") for r in rows).most_common()), "rows_of_these_families": len(ours),
            "rows_of_unnamed_python_models": sum(1 for r in rows if r.get("source") == "python")}


def snapshot_store(runs: Path) -> Path | None:
    """A copy of the configured store as it is now, where it is a SQLite file (None otherwise)."""
    import sqlite3

    from agnitra.store import open_store
    from agnitra.store.db import store_url

    url = store_url()
    if not url.startswith("sqlite:///") or url.endswith(":memory:"):
        return None
    open_store(url).close()  # created and migrated, as any run would
    copy = runs / "store-snapshot.db"
    copy.unlink(missing_ok=True)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    return copy.resolve()


@contextmanager
def store_of(name: str, snapshot: Path | None, runs: Path):
    """The store one family is searched against: a fresh copy of `snapshot` (what this family's run
    records, no later family's cost model or warm start learns from), or the configured one."""
    import shutil

    if snapshot is None:
        yield None
        return
    copy = (runs / f"store-{name}.db").resolve()
    shutil.copyfile(snapshot, copy)
    before = os.environ.get("AGNITRA_DB_URL")
    os.environ["AGNITRA_DB_URL"] = f"sqlite:///{copy}"
    try:
        yield copy
    finally:
        if before is None:
            os.environ.pop("AGNITRA_DB_URL", None)
        else:
            os.environ["AGNITRA_DB_URL"] = before


def _names(text: str) -> list[str]:
    names = list(FAMILIES) if text == "all" else [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; the twelve: {', '.join(FAMILIES)} (or all)")
    return names


def merge(files: list[str], out_dir: Path, out_file: str | None = None) -> Path:
    """Result files of several commands (the families split across them) as one, summarized anew."""
    docs = [json.loads(Path(f).read_text()) for f in files]
    rows = [r for d in docs for r in d.get("optimize", [])]
    doc = {**docs[0], "command": " ".join(sys.argv), "merged_from": [{"file": Path(f).name, "command": d.get("command"), "conditions": d.get("conditions")} for f, d in zip(files, docs)],
           "families": [r for d in docs for r in d.get("families", [])], "optimize": rows, "summary": summarize(rows)}
    path = Path(out_file) if out_file else out_dir / f"{Path(files[0]).stem}-merged.json"
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--families", default="all", help="comma-separated, or all (the twelve): surveyed")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--optimize", default="", help="comma-separated families to run agnitra.optimize on, or all")
    parser.add_argument("--budget", default="2m")
    parser.add_argument("--strategy", default=None, help="the search strategy (agnitra.optimize's strategy=; default: the api's)")
    parser.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"], help="agnitra.optimize casts the fp32-built model to it (default: fp32 as built)")
    parser.add_argument("--peers", default=None, help="comma-separated peer variants (default: the api's for the device)")
    parser.add_argument("--candidate-timeout", default=None, help="one candidate's limit (default: the api's)")
    parser.add_argument("--transforms", default="", help="comma-separated: the search limited to these (e.g. fuse-projections,compile)")
    parser.add_argument("--shared-store", action="store_true", help="every family searched against the configured store itself, which records each run "
                        "(default, for a SQLite store: each against a fresh copy of it as it was at the start, so no family's cost model learns from another)")
    parser.add_argument("--append", action="store_true", help="keep the --optimize rows already in today's result file")
    parser.add_argument("--merge", nargs="+", metavar="FILE", help="merge result files of several commands into one, summarized (nothing run)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--out-file", default=None, help="the result file (default: OUT/hf-families-<device>-<date>.json)")
    parser.add_argument("--runs", default="/tmp/agnitra-hf-families", help="where --optimize keeps its run folders and store copies")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.merge:
        path = merge(args.merge, out_dir, args.out_file)
        print("\n".join(summary_lines(json.loads(path.read_text())["summary"])))
        print(f"wrote {path}")
        return 0
    surveyed, optimizing = _names(args.families), _names(args.optimize)
    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from result_file import write_result

    from agnitra import api

    device = torch.device(args.device)
    report = api.describe_device(device)
    path = Path(args.out_file) if args.out_file else out_dir / f"hf-families-{device.type}-{dt.date.today().isoformat()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    conditions = {"size": args.size, "dims(hidden,layers,heads,ffn,seq)": SIZES[args.size], "weights": "random (seeded)", "survey dtype": "float32",
                  "threads": torch.get_num_threads()}
    snapshot = None
    if optimizing:
        snapshot = None if args.shared_store else snapshot_store(runs)
        conditions.update({
            "budget": args.budget, "dtype": args.dtype or "fp32 (as built)", "strategy": args.strategy or "the api's default", "peers": args.peers or "the api's default",
            "candidate_timeout": args.candidate_timeout or "the api's default", "tolerances": "the api's defaults",
            "store": store_census(device.type),
            "store_per_family": "a fresh copy of the store as it was at the start (nothing one family's run records reaches another's search)" if snapshot
                                else "the configured store itself: each family's run is recorded in it before the next family's search reads it",
            "candidate_time": TIME_MEASURES,
            "targets": {"failing_candidate_time": f"<= {TARGET_FAILING_SHARE:.0%}", "own_beats_best_compile": f">= {TARGET_OWN_WINS:.0%}"}})
        store = conditions["store"]
        print(f"store {store['url']}: " + (f"{store['timed']} timed measurements on {device.type} ({store['rows']} rows, {store['runs']} runs), "
                                           f"{store['rows_of_these_families']} of these families" if "error" not in store else f"not read ({store['error']})"), flush=True)
    rows, optimized = [], []
    if args.append and path.exists():
        optimized = json.loads(path.read_text()).get("optimize", [])

    def write() -> None:
        write_result(path, "agnitra.bench.hf-families/2", report, conditions=conditions, families=rows, optimize=optimized, summary=summarize(optimized) if optimized else None)

    for name in surveyed:
        started = time.perf_counter()
        try:
            row = survey(name, args.size, device)
        except Exception as exc:  # noqa: BLE001 - one family that does not build must not lose the others
            rows.append(failed_row(name, args.size, "survey", exc, time.perf_counter() - started))
            print(f"{name:16s} survey failed: {rows[-1]['error']}", flush=True)
            write()
            continue
        fp = row["fuse_projections"]
        print(f"{name:16s} groups {row['group_shapes']!s:22s} fuse-projections: "
              + (f"applies, rel error {fp['rel_error']:.1e}" if fp["applies"] else f"refused: {fp['reason'].split('by structure ')[-1][:160]}")
              + f"; space: {row['space']['candidates']} candidates, transforms {', '.join(row['space']['applicable'])}", flush=True)
        rows.append(row)
        write()
    options = dict(dtype=args.dtype, strategy=args.strategy, candidate_timeout=args.candidate_timeout, peers=[p for p in args.peers.split(",") if p] if args.peers else None)
    for name in optimizing:
        started = time.perf_counter()
        print(f"== {name}: optimize at size {args.size}, budget {args.budget}", flush=True)
        try:
            with store_of(name, snapshot, runs):
                result = optimize_row(name, args.size, args.device, args.budget, runs, [t for t in args.transforms.split(",") if t] or None, **options)
        except Exception as exc:  # noqa: BLE001 - one family that fails must not lose the others
            result = failed_row(name, args.size, "optimize", exc, time.perf_counter() - started)
            print(f"{name}: failed: {result['error']}", flush=True)
        else:
            t = result["candidate_time"]
            ratio = result["own_vs_best_compile"]
            print(f"{name}: answer {result['answer']} ({result['chosen'] or 'the original model'}) {result.get('median_ms')} ms; best compile peer "
                  f"{result['best_compile_peer']} {result['best_compile_peer_ms']} ms; Agnitra's best "
                  + (f"{ratio:.2f}x it" + (" beyond the noise" if result["own_beats_best_compile_beyond_noise"] else "") if ratio else "not compared")
                  + f"; {t['measured']} candidates, {t['failing']} did not pass: {t['failing_s']:.1f} of {t['total_s']:.1f} s; "
                  f"cost model trained on {result['cost_model_trained_on']}; {result['wall_s']} s", flush=True)
        optimized.append(result)
        write()
    if optimized:
        print("\n".join(summary_lines(summarize(optimized))))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    # run as the module `hf_families`, not `__main__`: the optimize worker unpickles the models by
    # their classes' module (benchmarks/ is on the sys.path it is sent), and TorchDynamo's guards
    # on Main.forward's globals look them up there
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hf_families

    raise SystemExit(hf_families.main())

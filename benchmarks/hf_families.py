"""Which transforms recognise real models: twelve transformers families (and a BatchNorm convnet)
built from their configs with seeded random weights.

    PYTHONPATH=src python benchmarks/hf_families.py --size small
    PYTHONPATH=src python benchmarks/hf_families.py --size small --optimize distilbert,mistral --budget 2m

For each family: the stackable projection groups found by structure (`transforms.structure`),
whether the stacked model computes the same (fp32, max relative error), the transforms of the
search space that apply on this device and why the others do not (`search.space.recipe_space`),
and with --optimize, `agnitra.optimize` with a small budget: the chosen recipe against the best
torch.compile peer of the same final run. Writes benchmarks/results/hf-families-<device>-<date>.json.

tests/test_hf_families.py builds the same families at size "tiny".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
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
    return Workload(name=f"{name}-{size}", model=model.eval(), example_inputs=inputs, task=task, weights="random", source=f"hf-families:{name}")


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


def optimize_row(name: str, size: str, device: str, budget: str, out: Path, transforms: list[str] | None = None) -> dict:
    from agnitra import api

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from optimize import versus_peers

    workload = build(name, size)
    started = time.perf_counter()
    run = out / f"{name}-{size}{'-' + '-'.join(transforms) if transforms else ''}"
    report = api.optimize(workload.model, workload.example_inputs, device=device, budget=budget, out=run, transforms=transforms).report
    candidates = [{"name": c.name, "status": c.status, "reason": (c.reason or "")[:200]} for c in report.candidates]
    # every variant of the final run with its correctness: a peer outside the tolerances the candidates
    # were held to (onnxruntime-int8 on random weights) is no fair best peer
    final = [{"name": v.name, "status": v.status, "median_ms": v.latency_ms.median if v.latency_ms else None,
              "passed": None if v.correctness is None else v.correctness.passed,
              "error": None if v.correctness is None else v.correctness.value} for v in report.bench.variants]
    peers = [v for v in final if v["name"] in report.search["peers"] and v["median_ms"] and v["passed"] is not False]
    best = min(peers, key=lambda v: v["median_ms"]) if peers else None
    chosen_ms = versus_peers(report).get("median_ms")
    return {"family": name, "size": size, "budget": budget, "transforms": transforms or "all", "wall_s": round(time.perf_counter() - started, 1), **versus_peers(report),
            "best_passing_peer": best and best["name"], "best_passing_peer_ms": best and best["median_ms"],
            "speedup_vs_best_passing_peer": best["median_ms"] / chosen_ms if best and chosen_ms else None,
            "final_run": final, "candidates": candidates, "notes": report.search.get("notes", [])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated; default all twelve")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--optimize", default="", help="comma-separated families to run agnitra.optimize on")
    parser.add_argument("--budget", default="2m")
    parser.add_argument("--transforms", default="", help="comma-separated: the search limited to these (e.g. fuse-projections,compile)")
    parser.add_argument("--append", action="store_true", help="keep the --optimize rows already in today's result file")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--runs", default="/tmp/agnitra-hf-families", help="where --optimize keeps its run folders")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from result_file import write_result

    from agnitra import api

    device = torch.device(args.device)
    report = api.describe_device(device)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"hf-families-{device.type}-{dt.date.today().isoformat()}.json"
    conditions = {"size": args.size, "dims(hidden,layers,heads,ffn,seq)": SIZES[args.size], "weights": "random (seeded)", "dtype": "float32",
                  "threads": torch.get_num_threads(), "budget": args.budget if args.optimize else None}
    rows, optimized = [], []
    if args.append and path.exists():
        optimized = json.loads(path.read_text()).get("optimize", [])
    for name in [n for n in args.families.split(",") if n]:
        row = survey(name, args.size, device)
        fp = row["fuse_projections"]
        print(f"{name:16s} groups {row['group_shapes']!s:22s} fuse-projections: "
              + (f"applies, rel error {fp['rel_error']:.1e}" if fp["applies"] else f"refused: {fp['reason'].split('by structure ')[-1][:160]}")
              + f"; space: {row['space']['candidates']} candidates, transforms {', '.join(row['space']['applicable'])}", flush=True)
        rows.append(row)
        write_result(path, "agnitra.bench.hf-families/1", report, conditions=conditions, families=rows, optimize=optimized)
    for name in [n for n in args.optimize.split(",") if n]:
        result = optimize_row(name, args.size, args.device, args.budget, Path(args.runs), [t for t in args.transforms.split(",") if t] or None)
        print(f"{name}: chosen {result['chosen'] or 'baseline'} {result.get('median_ms')} ms; best peer {result.get('best_peer')} "
              f"{result.get('best_peer_ms')} ms; best peer within tolerance {result.get('best_passing_peer')} {result.get('best_passing_peer_ms')} ms", flush=True)
        optimized.append(result)
        write_result(path, "agnitra.bench.hf-families/1", report, conditions=conditions, families=rows, optimize=optimized)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    # run as the module `hf_families`, not `__main__`: the optimize worker unpickles the models by
    # their classes' module (benchmarks/ is on the sys.path it is sent), and TorchDynamo's guards
    # on Main.forward's globals look them up there
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hf_families

    raise SystemExit(hf_families.main())

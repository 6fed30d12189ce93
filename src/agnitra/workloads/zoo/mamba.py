"""`mamba`: a transformers MambaForCausalLM of the mamba-130m shape, random weights, seq 64.

The selective-scan SSM workload. It is compared on full-sequence logits (teacher-forced by
construction), so it has no DecoderSpec: one call scores batch x seq_len tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from agnitra.models.generate import random_prompt
from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, count_on_meta, register_workload
from agnitra.workloads.zoo._hf import build_seeded

DEFAULT_SEQ_LEN = 64  # transformers' reference scan unrolls one step per position: 128 doubles capture time


class MambaLogits(nn.Module):
    """forward(input_ids [B, T]) -> logits [B, T, V], no recurrent-state cache."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


# mamba_ssm's own init: N(0, 0.02) embeddings and projections, out_proj scaled by 1/sqrt(layers).
# transformers' MambaConfig default (0.1, no rescale) grows the residual stream to std ~170 over
# 24 random layers, and the network turns chaotic: bf16 logits then disagree with fp32 on every
# argmax. With this init bf16 stays within ~1% (relative) of fp32.
_INIT = {"initializer_range": 0.02, "rescale_prenorm_residual": True}


def _config(size: str):
    from transformers import MambaConfig

    if size == "tiny":
        # special ids inside the small vocabulary
        return MambaConfig(
            vocab_size=256,
            hidden_size=64,
            num_hidden_layers=2,
            state_size=8,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
            **_INIT,
        )
    # state-spaces/mamba-130m: 768d, 24 layers, SSM state 16, expand 2, tied embeddings
    return MambaConfig(vocab_size=50280, hidden_size=768, num_hidden_layers=24, state_size=16, **_INIT)


def _mamba_model(size: str) -> nn.Module:
    from transformers import MambaForCausalLM

    return MambaForCausalLM(_config(size))


def count(size: str) -> int:
    return count_on_meta(lambda: _mamba_model(size))


@register_workload(
    "mamba",
    TaskKind.LM,
    "Mamba SSM of the mamba-130m shape (768d, 24 layers, state 16), random weights, logits over seq 64",
    count,
)
def _build(options: BuildOptions) -> Workload:
    cfg = _config(options.size)
    dtype = options.pick_dtype(torch.bfloat16)
    batch = options.batch or 1
    seq_len = options.seq_len or (16 if options.size == "tiny" else DEFAULT_SEQ_LEN)
    model = MambaLogits(build_seeded(lambda: _mamba_model(options.size), options, dtype)).eval()

    def tokens(seed: int) -> tuple:
        return (random_prompt(batch, seq_len, cfg.vocab_size, seed, options.device),)  # [B, T]

    return Workload(
        name="mamba",
        model=model,
        example_inputs=tokens(options.seed),
        task=TaskKind.LM,
        batch=batch,
        item_unit="tokens",
        description=(
            f"Mamba {cfg.hidden_size}d x {cfg.num_hidden_layers}L, state {cfg.state_size}, vocab {cfg.vocab_size}; "
            f"full-sequence logits, {seq_len} tokens per sequence (tokens per call = batch x {seq_len})"
        ),
        make_inputs=tokens,
        hints={"seq_len": seq_len, "tokens_per_call": batch * seq_len},
        weights="random",
    )

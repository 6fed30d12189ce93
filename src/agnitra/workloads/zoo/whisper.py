"""`whisper-tiny`: a transformers WhisperForConditionalGeneration of the whisper-tiny shape.

Random weights. One call encodes 30 s of log-mel features and scores a teacher-forced decoder
sequence: forward(input_features [B, 80, 3000], decoder_input_ids [B, T]) -> logits [B, T, V].
"""

from __future__ import annotations

import torch
from torch import nn

from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, count_on_meta, register_workload
from agnitra.workloads.zoo._hf import build_seeded

DEFAULT_DECODER_LEN = 32


class WhisperLogits(nn.Module):
    """forward(input_features [B, M, 2 * P], decoder_input_ids [B, T]) -> logits [B, T, V]."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_features=input_features, decoder_input_ids=decoder_input_ids, use_cache=False)
        return out.logits


def _config(size: str):
    from transformers import WhisperConfig

    if size == "tiny":
        # every dimension small; the special ids must lie inside the small vocabulary
        return WhisperConfig(
            vocab_size=128,
            num_mel_bins=8,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_source_positions=16,
            max_target_positions=32,
            pad_token_id=1,
            bos_token_id=1,
            eos_token_id=1,
            decoder_start_token_id=2,
            begin_suppress_tokens=None,
            suppress_tokens=None,
        )
    # openai/whisper-tiny: 384d, 4 + 4 layers, 6 heads, 80 mel bins, 1500 encoder positions
    return WhisperConfig(
        vocab_size=51865,
        num_mel_bins=80,
        d_model=384,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=6,
        decoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=50257,
        bos_token_id=50257,
        eos_token_id=50257,
        decoder_start_token_id=50258,
    )


def _whisper_model(size: str) -> nn.Module:
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration(_config(size))


def count(size: str) -> int:
    return count_on_meta(lambda: _whisper_model(size))


@register_workload(
    "whisper-tiny",
    TaskKind.LM,
    "Whisper encoder-decoder of the whisper-tiny shape (384d, 4+4 layers), random weights, 30 s audio",
    count,
)
def _build(options: BuildOptions) -> Workload:
    cfg = _config(options.size)
    dtype = options.pick_dtype(torch.float16)
    batch = options.batch or 1
    dec_len = min(options.seq_len or DEFAULT_DECODER_LEN, cfg.max_target_positions)
    frames = 2 * cfg.max_source_positions  # the encoder's stride-2 conv must yield exactly P positions
    model = WhisperLogits(build_seeded(lambda: _whisper_model(options.size), options, dtype)).eval()

    def audio_and_tokens(seed: int) -> tuple:
        gen = torch.Generator().manual_seed(seed)
        # log-mel features are scaled to roughly unit range by Whisper's feature extractor
        features = torch.randn(batch, cfg.num_mel_bins, frames, generator=gen)  # [B, M, 2P]
        ids = torch.randint(0, cfg.vocab_size, (batch, dec_len), generator=gen)  # [B, T]
        ids[:, 0] = cfg.decoder_start_token_id
        return features.to(options.device, dtype), ids.to(options.device)

    return Workload(
        name="whisper-tiny",
        model=model,
        example_inputs=audio_and_tokens(options.seed),
        task=TaskKind.LM,
        batch=batch,
        item_unit="sequences",
        description=(
            f"Whisper {cfg.d_model}d, {cfg.encoder_layers}+{cfg.decoder_layers} layers, {cfg.num_mel_bins} mel x "
            f"{frames} frames, decoder length {dec_len}; teacher-forced logits"
        ),
        make_inputs=audio_and_tokens,
        hints={"decoder_len": dec_len, "frames": frames},
        weights="random",
    )

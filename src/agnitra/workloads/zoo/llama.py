"""Our Llama-style decoders: `tinylm`, `llama-1b`, `llama-8b` (random weights, static KV cache)."""

from __future__ import annotations

import torch

from agnitra.models.generate import random_prompt
from agnitra.models.llama import PRESETS, Llama, build_llama
from agnitra.workloads.base import DecoderSpec, TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, count_on_meta, register_workload

DEFAULT_PROMPT_LEN = 32
DEFAULT_NEW_TOKENS = 128


def _config(preset: str, size: str):
    return PRESETS["tiny"] if size == "tiny" else PRESETS[preset]


def _build(preset: str, options: BuildOptions) -> Workload:
    return build_decoder(preset, _config(preset, options.size), options, tiny=options.size == "tiny")


def build_decoder(name: str, cfg, options: BuildOptions, tiny: bool = False, source: str | None = None, hints: dict | None = None) -> Workload:
    """A Llama-style decoder of config `cfg` as a decode-step workload: random weights, a static
    KV cache for --batch x (--seq-len prompt + --tokens new tokens)."""
    dtype = options.pick_dtype(torch.bfloat16)
    batch = options.batch or 1
    prompt_len = options.seq_len or (8 if tiny else DEFAULT_PROMPT_LEN)
    new_tokens = options.tokens or (8 if tiny else DEFAULT_NEW_TOKENS)
    model = build_llama(cfg, options.device, dtype, seed=options.seed)
    spec = DecoderSpec(batch=batch, prompt_len=prompt_len, max_new_tokens=new_tokens, vocab_size=cfg.vocab_size)
    model.setup_caches(batch, spec.max_seq_len)

    def decode_inputs(seed: int) -> tuple:
        # one decode step at the first generated position: tokens [B, 1], input_pos [1]
        tokens = random_prompt(batch, 1, cfg.vocab_size, seed, options.device)
        return tokens, torch.tensor([prompt_len], device=options.device)

    extra = {"source": source} if source else {}
    return Workload(
        name=name,
        model=model,
        example_inputs=decode_inputs(options.seed),
        task=TaskKind.LM,
        batch=batch,
        item_unit="tokens",
        description=f"Llama-style decoder {cfg.dim}d x {cfg.n_layers}L, vocab {cfg.vocab_size}, static KV cache",
        make_inputs=decode_inputs,
        decoder=spec,
        hints={"config": cfg.to_dict(), **(hints or {})},
        weights="random",
        **extra,
    )


def _register(preset: str, description: str) -> None:
    def count(size: str) -> int:
        return count_on_meta(lambda: Llama(_config(preset, size)))

    register_workload(preset, TaskKind.LM, description, count)(lambda options: _build(preset, options))


_register("tinylm", "Llama-style decoder, ~15.7M params, static KV cache (CPU tests, TinyLM runtime)")
_register("llama-1b", "Llama 1.1B shape (2048d, 22 layers, GQA 32/4), bf16 on GPU: quick GPU decode")
_register("llama-8b", "Llama-3-8B shape (4096d, 32 layers, GQA 32/8, vocab 128256), bf16, built on the GPU")

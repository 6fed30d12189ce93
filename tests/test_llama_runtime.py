"""The TinyLM runtime: static KV cache, sampling, batched generation, teacher forcing."""

from __future__ import annotations

import pytest
import torch

from agnitra.models.generate import Generator, random_prompt, sample
from agnitra.models.llama import PRESETS, build_llama


@pytest.fixture(scope="module")
def tiny():
    model = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=0)
    model.setup_caches(batch=2, max_seq_len=32)
    return model


def test_cached_decode_equals_full_forward(tiny):
    prompt = random_prompt(2, 6, tiny.config.vocab_size, seed=0, device="cpu")
    gen = Generator(tiny).generate(prompt, max_new_tokens=10)
    seq = gen.tokens  # [2, 16]
    fresh = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=0)  # no cache
    logits = fresh(seq[:, :-1])
    # every generated token is the argmax of the cache-free forward at its position
    assert torch.equal(logits[:, 5:].argmax(-1), seq[:, 6:])


def test_teacher_forced_logits_match_full_forward(tiny):
    prompt = random_prompt(2, 5, tiny.config.vocab_size, seed=1, device="cpu")
    reference = random_prompt(2, 7, tiny.config.vocab_size, seed=2, device="cpu")
    forced = Generator(tiny).teacher_forced_logits(prompt, reference)  # [2, 7, V]
    fresh = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=0)
    full = fresh(torch.cat([prompt, reference], dim=1))
    torch.testing.assert_close(forced, full[:, 4:11].float(), rtol=1e-4, atol=1e-4)


def test_batched_generation_rows_are_independent(tiny):
    prompt = random_prompt(2, 6, tiny.config.vocab_size, seed=3, device="cpu")
    both = Generator(tiny).generate(prompt, 8).tokens
    tiny.setup_caches(batch=1, max_seq_len=32)
    try:
        alone = Generator(tiny).generate(prompt[1:], 8).tokens
    finally:
        tiny.setup_caches(batch=2, max_seq_len=32)
    assert torch.equal(both[1:], alone)


def test_capacity_is_checked(tiny):
    prompt = random_prompt(2, 30, tiny.config.vocab_size, seed=0, device="cpu")
    with pytest.raises(ValueError, match="cache holds"):
        Generator(tiny).generate(prompt, 8)


def test_greedy_and_top_k_sampling():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0]])
    assert sample(logits).item() == 1
    torch.manual_seed(0)
    draws = {sample(logits, temperature=1.0, top_k=2).item() for _ in range(200)}
    assert draws == {1, 3}  # only the two most likely tokens, both drawn
    hot = torch.tensor([[0.0, 1.0, 0.5, 0.2]])
    torch.manual_seed(0)
    counts = torch.bincount(torch.cat([sample(hot, temperature=1.0) for _ in range(3000)]).flatten(), minlength=4).float()
    expected = torch.softmax(hot[0], -1) * 3000
    assert torch.allclose(counts, expected, rtol=0.15)  # draws follow the softmax


def test_weights_are_deterministic_and_seeded():
    a = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=5)
    b = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=5)
    c = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=6)
    assert torch.equal(a.layers[0].attention.wq.weight, b.layers[0].attention.wq.weight)
    assert not torch.equal(a.layers[0].attention.wq.weight, c.layers[0].attention.wq.weight)


def test_bf16_build_stays_in_bf16():
    model = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.rope_cos.dtype == torch.float32  # rotary tables stay fp32 for accuracy


def test_compiled_step_is_not_respecialised_by_teacher_forcing(tiny):
    """Generation and teacher forcing feed the step the same layout: one compilation serves both."""
    compilations = []

    def counting_backend(gm, example_inputs):
        compilations.append(gm)
        return gm.forward

    from agnitra.models.generate import decode_one_token

    step = torch.compile(decode_one_token, backend=counting_backend, fullgraph=True, dynamic=False)
    gen = Generator(tiny, decode_fn=step)
    prompt = random_prompt(2, 4, tiny.config.vocab_size, seed=0, device="cpu")
    gen.generate(prompt, 6)
    gen.teacher_forced_logits(prompt, random_prompt(2, 6, tiny.config.vocab_size, seed=1, device="cpu"))
    assert len(compilations) == 1

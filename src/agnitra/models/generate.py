"""The TinyLM runtime: prefill, one-token decode steps, sampling and batched generation.

Works with any model that has `setup_caches(batch, max_seq_len)` and
`forward(tokens [B, T], input_pos [T]) -> logits [B, T, V]` (our Llama). The decode step is a
plain function so a variant can compile it (`torch.compile(decode_one_token, ...)`) or capture it
in a CUDA graph; everything per token stays on the device (no host sync while sampling).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch


def sample(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None) -> torch.Tensor:
    """Next token [B, 1] from logits [B, V]: greedy at temperature 0, else top-k sampling."""
    if temperature <= 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    scaled = logits.float() / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = torch.where(scaled < kth, torch.full_like(scaled, float("-inf")), scaled)
    probs = torch.softmax(scaled, dim=-1)
    # argmax(p / q) with q ~ Exp(1) draws from p without torch.multinomial's host sync
    q = torch.empty_like(probs).exponential_(1)
    return torch.argmax(probs / q, dim=-1, keepdim=True)


def decode_one_token(model, tokens: torch.Tensor, input_pos: torch.Tensor, temperature: float = 0.0, top_k: int | None = None):
    """One decode step: tokens [B, 1] at input_pos [1] -> (next token [B, 1], logits [B, V])."""
    logits = model(tokens, input_pos)[:, -1]
    return sample(logits, temperature, top_k), logits


def prefill(model, prompt: torch.Tensor, input_pos: torch.Tensor, temperature: float = 0.0, top_k: int | None = None):
    """Run the prompt [B, T] through the model, filling the cache; returns the first new token."""
    logits = model(prompt, input_pos)[:, -1]
    return sample(logits, temperature, top_k), logits


class StepClock(Protocol):
    """Marks time between decode steps; the harness supplies CUDA-event or host-clock versions."""

    def mark(self) -> None: ...


@dataclass
class Generation:
    tokens: torch.Tensor  # [B, prompt + new]
    prompt_len: int
    logits: list[torch.Tensor] = field(default_factory=list)  # per step [B, V], when kept


DecodeFn = Callable[..., tuple]


def step_functions(model) -> tuple[DecodeFn, DecodeFn]:
    """The decode and prefill steps a model runs with. The model is their one carrier: a runtime
    transform that compiles or captures a step leaves it on the model it returns
    (`agnitra_decode_fn`, `agnitra_prefill_fn`; wrappers pass the attributes through), and whoever
    holds the model (a patch, a benchmark variant, optimize's answer) generates with them."""
    return getattr(model, "agnitra_decode_fn", decode_one_token), getattr(model, "agnitra_prefill_fn", prefill)


class Generator:
    """Drives prefill and decode steps over a model with a static KV cache."""

    def __init__(
        self,
        model,
        temperature: float = 0.0,
        top_k: int | None = None,
        decode_fn: DecodeFn | None = None,
        prefill_fn: DecodeFn | None = None,
    ) -> None:
        """The steps default to the model's own (`step_functions`); pass them to override."""
        self.model = model
        own_decode, own_prefill = step_functions(model)
        self.decode_fn = decode_fn or own_decode
        self.prefill_fn = prefill_fn or own_prefill
        self.temperature = temperature
        self.top_k = top_k

    def _check_capacity(self, batch: int, total_len: int) -> None:
        if batch > self.model.max_batch or total_len > self.model.max_seq_len:
            raise ValueError(
                f"generation needs batch {batch} x {total_len} positions but the cache holds "
                f"{self.model.max_batch} x {self.model.max_seq_len}; call setup_caches first"
            )

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, clock: StepClock | None = None, keep_logits: bool = False) -> Generation:
        """Prompt [B, T] -> prompt plus `max_new_tokens` tokens; `clock.mark()` after prefill and each step."""
        B, T = prompt.shape
        self._check_capacity(B, T + max_new_tokens)
        device = prompt.device
        out = torch.empty(B, T + max_new_tokens, dtype=prompt.dtype, device=device)
        out[:, :T] = prompt
        result = Generation(out, T)
        token, logits = self.prefill_fn(self.model, prompt, torch.arange(T, device=device), self.temperature, self.top_k)
        out[:, T : T + 1] = token
        if keep_logits:
            result.logits.append(logits.float().clone())
        if clock:
            clock.mark()
        input_pos = torch.tensor([T], device=device)
        for i in range(1, max_new_tokens):
            token, logits = self.decode_fn(self.model, _step_input(token), input_pos, self.temperature, self.top_k)
            out[:, T + i : T + i + 1] = token
            if keep_logits:
                result.logits.append(logits.float().clone())
            input_pos += 1
            if clock:
                clock.mark()
        return result

    @torch.no_grad()
    def teacher_forced_logits(self, prompt: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        """Logits [B, N, V] (float32) predicting reference[:, i] after the prompt and reference[:, :i].

        The reference tokens are fed at every step regardless of what the model would pick, so two
        variants are compared position by position on the same context.
        """
        B, T = prompt.shape
        N = reference.shape[1]
        self._check_capacity(B, T + N)
        device = prompt.device
        # same sampling arguments as generate(): a compiled step is not specialised twice
        _, logits = self.prefill_fn(self.model, prompt, torch.arange(T, device=device), self.temperature, self.top_k)
        collected = [logits.float().clone()]
        input_pos = torch.tensor([T], device=device)
        for i in range(N - 1):
            _, logits = self.decode_fn(self.model, _step_input(reference[:, i : i + 1]), input_pos, self.temperature, self.top_k)
            collected.append(logits.float().clone())
            input_pos += 1
        return torch.stack(collected, dim=1)


def _step_input(tokens: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous [B, 1] copy: one stride layout for every step, so a compiled step is
    never re-specialised (a column slice keeps its parent's stride), and a CUDA-graph replay
    cannot overwrite it."""
    return tokens.clone(memory_format=torch.contiguous_format)


def random_prompt(batch: int, length: int, vocab_size: int, seed: int, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=gen).to(device)

"""`tinylm-py`: our Llama decoder trained on the Python standard library's source (real weights).

Two sizes. `small` (~1.7M parameters) ships with the package (workloads/data/tinylm-py-small.pt,
trained by `agnitra zoo build tinylm-py --size small`, deterministic, about 4 minutes on two
CPU cores). `large` (~75M) is trained once on a GPU by `agnitra zoo build tinylm-py --size large
--device cuda` and cached under the cache dir. Prompts and the verification windows are
held-out standard-library text, so candidates are judged by held-out perplexity.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import torch

from agnitra.config import load_settings
from agnitra.errors import UserError
from agnitra.models.llama import Llama
from agnitra.models.pycorpus import read_corpus, window
from agnitra.models.train_lm import SIZES, load_checkpoint
from agnitra.workloads.base import DecoderSpec, TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, count_on_meta, register_workload

NAME = "tinylm-py"
DEFAULT_PROMPT_LEN = 64
DEFAULT_NEW_TOKENS = 64
TEXT_WINDOWS = 512  # evenly spread held-out windows the verification draws from (32,768 positions of 64 tokens; more repeat them)
CALIBRATION_WINDOWS = 64  # evenly spread training-corpus windows calibration draws from


def model_size(options_size: str) -> str:
    """The zoo's --size for this workload: large, or small (full and tiny mean small)."""
    return "large" if options_size == "large" else "small"


def built_checkpoint(size: str) -> Path:
    """Where `agnitra zoo build` puts a checkpoint (the cache dir)."""
    return load_settings().cache_path / "zoo" / f"{NAME}-{size}.pt"


def shipped_checkpoint() -> Path:
    return Path(str(resources.files("agnitra.workloads") / "data" / f"{NAME}-small.pt"))


def checkpoint(size: str) -> Path:
    built = built_checkpoint(size)
    if built.is_file():
        return built
    if size == "small":
        return shipped_checkpoint()
    raise UserError(f"{NAME} --size {size} is not built on this machine; build it once with "
                    f"`agnitra zoo build {NAME} --size {size} --device cuda` (about 5 minutes on one GPU)")


def _build(options: BuildOptions) -> Workload:
    size = model_size(options.size)
    dtype = options.pick_dtype(torch.bfloat16)
    model, record = load_checkpoint(checkpoint(size), options.device, dtype)
    batch = options.batch or 1
    prompt_len = options.seq_len or DEFAULT_PROMPT_LEN
    new_tokens = options.tokens or DEFAULT_NEW_TOKENS
    cfg = model.config
    spec = DecoderSpec(batch=batch, prompt_len=prompt_len, max_new_tokens=new_tokens, vocab_size=cfg.vocab_size)
    if spec.max_seq_len > cfg.rope_len:
        raise UserError(f"{NAME}: --seq-len {prompt_len} + --tokens {new_tokens} exceed the {cfg.rope_len} positions it was built for")
    model.setup_caches(batch, spec.max_seq_len)
    heldout = read_corpus("heldout").tokens
    training: list[torch.Tensor] = []  # read on the first calibration batch only

    def text_window(index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Held-out text for window `index`: (prompt [B, prompt_len], continuation [B, new_tokens])."""
        rows = torch.stack([window(heldout, index * batch + b, spec.max_seq_len, TEXT_WINDOWS * batch) for b in range(batch)]).to(options.device)
        return rows[:, :prompt_len], rows[:, prompt_len:]

    def calibration(index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training text for batch `index`, whole windows in prefill form: (tokens [B, L], positions)."""
        if not training:
            training.append(read_corpus("train").tokens)
        rows = torch.stack([window(training[0], index * batch + b, spec.max_seq_len, CALIBRATION_WINDOWS * batch) for b in range(batch)]).to(options.device)
        return rows, torch.arange(spec.max_seq_len, device=options.device)

    def decode_inputs(seed: int) -> tuple:
        prompt, _ = text_window(seed)
        return prompt[:, -1:], torch.tensor([prompt_len], device=options.device)

    return Workload(
        name=NAME,
        model=model,
        example_inputs=decode_inputs(options.seed),
        task=TaskKind.LM,
        batch=batch,
        item_unit="tokens",
        description=(f"Llama-style decoder {cfg.dim}d x {cfg.n_layers}L, byte vocabulary, trained on the Python standard library "
                     f"({size}: held-out perplexity {record['heldout_perplexity']:.2f}, unigram {record['unigram_perplexity']:.2f})"),
        make_inputs=decode_inputs,
        decoder=spec,
        hints={"config": cfg.to_dict(), "training": {k: record[k] for k in ("size", "steps", "tokens_seen", "heldout_perplexity", "unigram_perplexity", "corpus")}},
        weights="trained",
        text_windows=text_window,
        calibration=calibration,
    )


def _count(size: str) -> int:
    return count_on_meta(lambda: Llama(SIZES[model_size(size)].config))


register_workload(NAME, TaskKind.LM, "Llama-style decoder trained on the Python standard library (real weights; small ~1.7M ships, large ~75M: agnitra zoo build)", _count)(_build)



def build_trained(size: str, device: torch.device, progress=None) -> tuple[Path, dict]:
    """Train `tinylm-py` of `size` on `device` and cache it where the zoo looks first."""
    from dataclasses import asdict

    from agnitra.models.train_lm import save_checkpoint, train

    if size not in SIZES:
        raise UserError(f"{NAME} --size must be one of: {', '.join(SIZES)}; got {size!r}")
    if size == "large" and device.type != "cuda":
        raise UserError(f"{NAME} --size large trains ~75M parameters: on the CPU that takes hours; run it with --device cuda")
    model, record = train(size, device, progress)
    path = save_checkpoint(model, record, built_checkpoint(size))
    return path, asdict(record)

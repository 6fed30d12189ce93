"""Comparison functions: values against hand computations, thresholds, NaN handling."""

from __future__ import annotations

import math

import pytest
import torch

from agnitra.verify import check_reference, compare, compare_sets, default_threshold, logit_stats, relative_error, sqnr_db


def test_relative_error_and_sqnr():
    ref = torch.tensor([3.0, 4.0])  # norm 5
    cand = torch.tensor([3.0, 4.5])  # diff norm 0.5
    assert relative_error(ref, cand) == pytest.approx(0.1)
    assert sqnr_db(ref, cand) == pytest.approx(20.0)
    assert sqnr_db(ref, ref) == 300.0  # capped, finite


def test_rel_error_threshold_depends_on_dtype():
    assert default_threshold("rel_error", torch.float32) < default_threshold("rel_error", torch.bfloat16)
    ref = [torch.ones(100)]
    close = [torch.ones(100) * 1.0005]
    far = [torch.ones(100) * 1.01]
    assert compare("rel_error", ref, close).passed
    assert not compare("rel_error", ref, far).passed
    assert compare("rel_error", ref, far, threshold=0.02).passed


def test_nan_and_inf_always_fail():
    ref = [torch.ones(4, 8)]
    bad = torch.ones(4, 8)
    bad[1, 2] = float("nan")
    for metric in ("rel_error", "cosine", "top1", "logits"):
        result = compare(metric, ref, [bad], threshold=-1e9)
        assert not result.passed, metric
        assert "NaN" in result.details["error"]


def test_shape_mismatch_fails_with_reason():
    result = compare("rel_error", [torch.ones(2, 3)], [torch.ones(3, 2)])
    assert not result.passed and result.details["error"] == "output[0]: shape (3, 2) vs reference (2, 3)"
    result = compare("rel_error", [torch.ones(2)], [torch.ones(2), torch.ones(2)])
    assert not result.passed and result.details["error"] == "output: 2 items vs reference 1"


def test_cosine_mean_and_min():
    ref = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    cand = torch.tensor([[1.0, 0.0], [1.0, 1.0]])  # second row at 45 degrees
    result = compare("cosine", [ref], [cand])
    assert result.value == pytest.approx((1 + math.sqrt(0.5)) / 2)
    assert result.details["min"] == pytest.approx(math.sqrt(0.5))
    assert not result.passed


def test_top1_agreement():
    ref = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    cand = ref.clone()
    cand[0] = torch.tensor([0.9, 0.1])
    result = compare("top1", [ref], [cand])
    assert result.value == pytest.approx(0.75)
    assert not result.passed  # default needs 0.9
    assert compare("top1", [ref], [ref]).value == 1.0


def test_logit_stats_kl_and_agreement():
    torch.manual_seed(0)
    ref = torch.randn(2, 16, 50)
    stats = logit_stats(ref, ref)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-12) and stats["token_agreement"] == 1.0
    noisy = ref + 0.5 * torch.randn_like(ref)
    stats = logit_stats(ref, noisy)
    assert stats["kl"] > 0.01 and stats["token_agreement"] < 1.0
    assert stats["positions"] == 32
    # hand-computed KL for one position
    p = torch.softmax(ref[0, 0].double(), -1)
    q = torch.softmax(noisy[0, 0].double(), -1)
    one = logit_stats(ref[:1, :1], noisy[:1, :1])["kl"]
    assert one == pytest.approx(float((p * (p / q).log()).sum()), rel=1e-9)


def test_logits_metric_passes_on_sqnr():
    torch.manual_seed(0)
    ref = torch.randn(1, 8, 100)
    assert compare("logits", [ref], [ref + 0.01 * torch.randn_like(ref)]).passed  # ~40 dB
    assert not compare("logits", [ref], [ref + 0.3 * torch.randn_like(ref)]).passed  # ~10 dB


def test_unknown_metric_is_rejected():
    with pytest.raises(ValueError):
        compare("nope", [torch.ones(1)], [torch.ones(1)])


def test_a_row_metric_judges_the_main_leaf_and_the_others_by_relative_error():
    torch.manual_seed(0)
    logits, hidden = torch.randn(8, 5), torch.randn(8, 16)
    reference = {"logits": logits, "hidden": hidden}
    close = compare("top1", reference, {"logits": logits, "hidden": hidden * 1.05})
    assert close.passed and close.value == 1.0 and close.details["leaf_values"]["output['hidden']"] == pytest.approx(0.05)
    far = compare("top1", reference, {"logits": logits, "hidden": hidden * 1.5})
    assert not far.passed and far.details["error"] == "output['hidden']: rel_error 0.5 > 0.1"


def test_sets_are_pooled_row_by_row():
    ref = torch.eye(5)  # five rows, argmax on the diagonal
    flipped = ref.clone()
    flipped[0] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])
    # one row of ten disagrees: 0.9 over both sets, though one set alone agrees on 0.8
    result = compare_sets("top1", [(ref, flipped), (ref, ref)])
    assert result.passed and result.value == pytest.approx(0.9) and result.details["sets"] == 2


def test_the_reference_is_checked_for_nan():
    assert check_reference([{"a": torch.ones(2)}, 1.5]) is None
    said = check_reference([{"a": torch.tensor([1.0, float("inf")])}, float("nan")])
    assert said == "the original model's output has 2 NaN/Inf values on the held-out inputs; no candidate can be verified against it"
    assert compare("rel_error", torch.tensor([float("nan")]), torch.ones(1)).details["error"] == said.replace("2 NaN", "1 NaN")

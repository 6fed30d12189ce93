"""Held-out perplexity's judgement: the rise over the original's, with its 95% interval over the
held-out windows (how finely that much text tells two models apart)."""

from __future__ import annotations

import math

import pytest
import torch

from agnitra.verify.perplexity import judge_perplexity, paired_change, window_losses


def _text(windows: int = 8, positions: int = 16, vocab: int = 12, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(windows, positions, vocab, generator=generator)
    targets = torch.randint(0, vocab, (windows, positions), generator=generator)
    return logits, targets


def test_the_same_logits_rise_by_nothing_with_no_width():
    logits, targets = _text()
    judged = judge_perplexity(logits, logits.clone(), targets)
    assert judged.value == 0.0 and judged.passed
    assert judged.details["increase_ci95"] == [0.0, 0.0] and judged.details["windows"] == 8


def test_the_interval_holds_the_rise_and_widens_with_the_windows_disagreement():
    logits, targets = _text(windows=16)
    generator = torch.Generator().manual_seed(1)
    worse_in_some = logits + torch.randn(16, 1, 1, generator=generator).abs() * torch.randn(logits.shape, generator=generator)
    judged = judge_perplexity(logits, worse_in_some, targets)
    low, high = judged.details["increase_ci95"]
    assert low < judged.value < high
    # the rise is the ratio of the perplexities, and the interval's centre is near it
    reference, candidate = window_losses(logits, targets), window_losses(worse_in_some, targets)
    assert judged.value == pytest.approx(math.exp(float(candidate.mean() - reference.mean())) - 1, rel=1e-9)
    # the same mean rise spread evenly over the windows is told apart more finely
    even = judge_perplexity(logits, logits + 0.5 * torch.randn(logits.shape, generator=generator), targets).details["increase_ci95"]
    assert even[1] - even[0] < high - low


def test_one_window_has_no_interval():
    logits, targets = _text(windows=1)
    judged = judge_perplexity(logits, logits * 1.1, targets)
    assert judged.details["increase_ci95"] is None and judged.value != 0


def test_the_layout_report_shows_the_interval():
    from agnitra.report.layout_files import layout_csv, layout_html

    mode = {"mode": "once", "served": "", "speedup": None, "gates": [], "steps": [],
            "quality": {"metric": "perplexity", "value": 0.004, "passed": True, "ci95": [-0.001, 0.009]}}
    doc = {"workload": {"name": "w"}, "transforms": "quant:int4", "original": {}, "modes": [mode], "notes": []}
    mode["quality"]["against_none"] = {"value": -0.02, "ci95": [-0.03, -0.01]}
    assert "95% over the held-out windows: -0.10% to +0.90%); against none, window by window: -2.00% (-3.00% to -1.00%)" in layout_html(doc)
    assert layout_csv(doc).splitlines()[0].endswith("quality_metric,quality_value,quality_ci95_low,quality_ci95_high,quality_vs_none,quality_vs_none_ci95_low,quality_vs_none_ci95_high")


def test_two_candidates_on_the_same_windows_are_told_apart_more_finely_pair_by_pair():
    """Both rise a lot and unevenly over the original, by nearly the same amount in each window:
    each interval is wide, their paired difference is narrow and excludes zero."""
    logits, targets = _text(windows=16)
    generator = torch.Generator().manual_seed(2)
    damage = torch.randn(16, 1, 1, generator=generator).abs() * torch.randn(logits.shape, generator=generator)
    first, second = judge_perplexity(logits, logits + damage, targets), judge_perplexity(logits, logits + 1.05 * damage, targets)
    paired = paired_change(first.details["window_log_ratios"], second.details["window_log_ratios"])
    assert paired["value"] == pytest.approx((1 + second.value) / (1 + first.value) - 1, rel=1e-9)
    low, high = paired["ci95"]
    assert 0 < low < high and high - low < min(b - a for a, b in (first.details["increase_ci95"], second.details["increase_ci95"])) / 4
    assert paired_change([], second.details["window_log_ratios"]) is None and paired_change([0.1], [0.1, 0.2]) is None


def test_windows_laid_end_to_end_in_a_row_are_resampled_one_by_one():
    logits, targets = _text(windows=6)
    one_row = lambda t: t.reshape(1, -1, *t.shape[2:])  # noqa: E731 - six windows of 16 positions, end to end
    as_rows = judge_perplexity(logits, logits * 1.3, targets)
    end_to_end = judge_perplexity(one_row(logits), one_row(logits * 1.3), one_row(targets), window=16)
    assert end_to_end.details["windows"] == 6 and end_to_end.value == pytest.approx(as_rows.value, rel=1e-9)
    assert end_to_end.details["increase_ci95"] == pytest.approx(as_rows.details["increase_ci95"], rel=1e-9)
    assert judge_perplexity(one_row(logits), one_row(logits * 1.3), one_row(targets)).details["increase_ci95"] is None

"""Held-out perplexity: the quality a user of a trained language model cares about.

Where a decoder comes with held-out text (`Workload.text_windows`), every variant is
teacher-forced on the same real text and judged by how much its perplexity on that text rises
over the original's (relative: +1% means 1.01x). Logit SQNR, KL and next-token agreement are
kept beside it, and still required where the user asked for them. The rise comes with its 95%
interval over the held-out windows (`increase_ci95`: a bootstrap of the windows, each window's
log-ratio of perplexities resampled as a whole): how finely this much text tells two models apart.
Each window's log-ratio is kept (`window_log_ratios`), so that two candidates judged on the same
windows can be compared pair by pair (`paired_change`), which resolves finer than either interval.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from agnitra.results import Correctness
from agnitra.verify.compare import Tolerances, logit_stats

DEFAULT_MAX_PPL_INCREASE = 0.01  # +1% held-out perplexity
RESAMPLES = 2000


def perplexity(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """exp(mean cross-entropy) of logits [B, N, V] predicting targets [B, N]."""
    return math.exp(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1).to(logits.device)).item())


def window_losses(logits: torch.Tensor, targets: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Each window's mean cross-entropy, as float64 on the CPU: a window is a row, or each run of
    `window` positions of a row (windows of held-out text laid end to end)."""
    losses = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1).to(logits.device), reduction="none").reshape(targets.shape)
    if window and losses.shape[1] % window == 0:
        return losses.reshape(losses.shape[0], -1, window).mean(dim=2).reshape(-1).double().cpu()
    return losses.mean(dim=1).double().cpu()


def increase_interval(reference_losses: torch.Tensor, candidate_losses: torch.Tensor, confidence: float = 0.95, seed: int = 0) -> list[float] | None:
    """The relative perplexity rise's interval over the windows (None with fewer than two): the
    windows resampled in pairs (`scipy.stats.bootstrap`, percentile) on their log-ratios."""
    import numpy as np
    from scipy import stats

    log_ratios = (candidate_losses - reference_losses).numpy()
    if len(log_ratios) < 2 or not np.isfinite(log_ratios).all():
        return None
    if np.ptp(log_ratios) == 0:
        return [math.expm1(float(log_ratios[0]))] * 2
    found = stats.bootstrap((log_ratios,), np.mean, vectorized=True, n_resamples=RESAMPLES, confidence_level=confidence, method="percentile",
                            rng=np.random.default_rng(seed)).confidence_interval
    return [math.expm1(float(found.low)), math.expm1(float(found.high))]


def paired_change(baseline_log_ratios: list[float], candidate_log_ratios: list[float]) -> dict | None:
    """The candidate's perplexity relative to another candidate's on the same windows, with its
    95% interval (None where the windows differ or are too few)."""
    if not baseline_log_ratios or len(baseline_log_ratios) != len(candidate_log_ratios):
        return None
    baseline, candidate = torch.tensor(baseline_log_ratios, dtype=torch.float64), torch.tensor(candidate_log_ratios, dtype=torch.float64)
    return {"value": math.expm1(float((candidate - baseline).mean())), "ci95": increase_interval(baseline, candidate)}


def judge_perplexity(reference: torch.Tensor, candidate: torch.Tensor, targets: torch.Tensor, tolerances: Tolerances | None = None,
                     window: int | None = None) -> Correctness:
    """The candidate's logits [B, N, V] against the original's on text whose next tokens are
    `targets`; `window`: the held-out windows' length where they lie end to end in a row."""
    tolerances = tolerances or Tolerances()
    threshold = DEFAULT_MAX_PPL_INCREASE if tolerances.max_ppl_increase is None else tolerances.max_ppl_increase
    bad = int((~torch.isfinite(candidate)).sum())
    if bad:
        return Correctness("perplexity", None, False, threshold, {"error": f"logits: {bad} NaN/Inf values in the output"})
    reference_losses, candidate_losses = window_losses(reference, targets, window), window_losses(candidate, targets, window)
    base, ppl = math.exp(float(reference_losses.mean())), math.exp(float(candidate_losses.mean()))
    increase = ppl / base - 1.0
    details = {"perplexity": ppl, "reference_perplexity": base, "increase_ci95": increase_interval(reference_losses, candidate_losses),
               "windows": len(reference_losses), "window_log_ratios": (candidate_losses - reference_losses).tolist(), **logit_stats(reference, candidate)}
    result = Correctness("perplexity", increase, increase <= threshold, threshold, details)
    if not result.passed:
        details["error"] = f"held-out perplexity {ppl:.4g} is {increase:+.2%} over the original's {base:.4g} (allowed {threshold:+.2%})"
    for name, value, required in (("logit SQNR", details["sqnr_db"], tolerances.min_sqnr_db), ("next-token agreement", details["token_agreement"], tolerances.min_token_agreement)):
        if result.passed and required is not None and value < required:
            result.passed = False
            details["error"] = f"{name} {value:.4g} < {required}"
    return result

"""Whether a candidate is faster than the baseline beyond the measured noise.

The harness times variants in interleaved rounds (each variant a few calls a round, who goes
first rotating), so round r of the baseline and round r of a candidate ran under the same
conditions: a busy spell slows both. The speedup is the ratio of the baseline's median round to
the candidate's; its confidence interval is a bootstrap over the rounds resampled in pairs
(`scipy.stats.bootstrap`, paired, percentile), as wide as the rounds disagree. A candidate is
faster only when the interval's low end clears `min_speedup` (1.01 by default, so a "1.00x"
never passes). With fewer than `MIN_PAIRED_ROUNDS` rounds (a decoder's few generations) each
variant's samples are resampled on their own instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_PAIRED_ROUNDS = 4
MIN_SPEEDUP = 1.01
CONFIDENCE = 0.95
RESAMPLES = 2000

Samples = Sequence[Sequence[float]] | Sequence[float]  # per-round samples, or one sample a round


@dataclass
class Verdict:
    faster: bool
    speedup: float  # baseline / candidate (medians)
    low: float  # confidence interval of the speedup
    high: float
    reason: str
    method: str = ""  # "paired rounds" or "unpaired samples"

    def interval(self) -> list[float]:
        return [self.low, self.high]


def faster_beyond_noise(
    baseline: Samples,
    candidate: Samples,
    *,
    min_speedup: float = MIN_SPEEDUP,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Verdict:
    """Is `candidate` faster than `baseline` beyond the noise? Both are the per-round samples of
    one interleaved run (milliseconds; lists of rounds, or flat lists: one sample a round)."""
    base_rounds, cand_rounds = _rounds(baseline), _rounds(candidate)
    if not base_rounds or not cand_rounds:
        return Verdict(False, math.nan, math.nan, math.nan, "not compared: no timed samples")
    rounds = min(len(base_rounds), len(cand_rounds))
    paired = rounds >= MIN_PAIRED_ROUNDS
    if paired:  # the rounds' medians, in pairs
        data = ([np.median(r) for r in base_rounds[:rounds]], [np.median(r) for r in cand_rounds[:rounds]])
    else:
        data = (np.concatenate(base_rounds), np.concatenate(cand_rounds))
    speedup = float(_ratio_of_medians(*data))
    if min(len(d) for d in data) < 2:  # nothing to resample (--runs 1): said, not a crash
        return Verdict(False, speedup, math.nan, math.nan, f"{speedup:.2f}x from one timed sample each: not judged against the noise (use --runs 2 or more)")
    from scipy import stats  # here, not at import: a process that never compares timings (the CLI's parent) does not pay its 2 s

    result = stats.bootstrap(
        data, _ratio_of_medians, paired=paired, vectorized=True, n_resamples=resamples,
        confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    method = "paired rounds" if paired else "unpaired samples"
    said = f"{speedup:.2f}x ({low:.2f}-{high:.2f}, {confidence:.0%}, {method} of {rounds} rounds)"
    if low > min_speedup:
        return Verdict(True, speedup, low, high, f"{said}: faster beyond the noise", method)
    return Verdict(False, speedup, low, high, f"{said}: not faster beyond the noise (the interval's low end is not above {min_speedup:g}x)", method)


def _rounds(samples: Samples) -> list[np.ndarray]:
    rounds = [np.atleast_1d(np.asarray(r, dtype=np.float64)) for r in samples]
    return [r for r in rounds if r.size]


def _ratio_of_medians(baseline: np.ndarray, candidate: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(baseline, axis=axis) / np.median(candidate, axis=axis)


def round_cv(rounds: Samples) -> float | None:
    """Coefficient of variation of the per-round medians (None with fewer than two rounds)."""
    medians = [np.median(r) for r in _rounds(rounds)]
    if len(medians) < 2 or np.mean(medians) <= 0:
        return None
    return float(np.std(medians, ddof=1) / np.mean(medians))

"""How two outputs of one workload are compared: named metrics with thresholds.

Every comparator takes the reference and candidate outputs as lists of tensors (the tensor
leaves of the model's output) and returns a `Correctness`. NaN or Inf in the candidate fails.
Thresholds default per metric and dtype (`default_threshold`) and can be overridden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from agnitra.report.schema import Correctness

Comparator = Callable[[list[torch.Tensor], list[torch.Tensor], float | None], Correctness]
COMPARATORS: dict[str, Comparator] = {}

# Relative L2 error allowed between two implementations in a given precision (the looser of the
# two dtypes applies): fp32 leaves room for TF32 matmuls, 16-bit for different rounding orders.
REL_ERROR_BY_DTYPE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.float16: 1e-2, torch.bfloat16: 5e-2}
MIN_COSINE = 0.99  # embeddings: mean cosine similarity
MIN_TOP1 = 0.9  # classifiers: fraction of rows with the same argmax
MIN_SQNR_DB = 20.0  # decoders: logit signal-to-quantisation-noise ratio


@dataclass(frozen=True)
class Tolerances:
    """What a candidate must meet against the untouched model; None = the metric's default."""

    max_error: float | None = None  # relative L2 error (rel_error)
    min_cosine: float | None = None  # mean cosine similarity (embeddings)
    min_top1: float | None = None  # top-1 agreement (classifiers)
    min_sqnr_db: float | None = None  # logit SQNR (decoders)
    min_token_agreement: float | None = None  # next-token agreement (decoders); not required by default
    # decoders: teacher-forced positions compared, in windows of the generation length with a
    # fresh prompt each (the timed KV cache is never resized); None = one window
    check_positions: int | None = None

    def threshold(self, metric: str) -> float | None:
        return {"rel_error": self.max_error, "cosine": self.min_cosine, "top1": self.min_top1, "logits": self.min_sqnr_db}.get(metric)


def register_comparator(name: str):
    def wrap(fn: Comparator) -> Comparator:
        COMPARATORS[name] = fn
        return fn

    return wrap


def compare(metric: str, reference: list[torch.Tensor], candidate: list[torch.Tensor], threshold: float | None = None, tolerances: Tolerances | None = None) -> Correctness:
    if metric not in COMPARATORS:
        raise ValueError(f"unknown comparison '{metric}'; known: {', '.join(sorted(COMPARATORS))}")
    problem = _structure_problem(reference, candidate)
    if problem:
        return Correctness(metric, None, False, threshold, {"error": problem})
    nonfinite = sum(int((~torch.isfinite(c)).sum()) for c in candidate if c.is_floating_point())
    if nonfinite:
        return Correctness(metric, None, False, threshold, {"error": f"{nonfinite} NaN/Inf values in the output"})
    if threshold is None and tolerances is not None:
        threshold = tolerances.threshold(metric)
    result = COMPARATORS[metric](reference, candidate, threshold)
    agreement = result.details.get("token_agreement")
    if tolerances and tolerances.min_token_agreement is not None and agreement is not None and agreement < tolerances.min_token_agreement:
        result.passed = False
        result.details["failed"] = f"next-token agreement {agreement:.3f} < {tolerances.min_token_agreement}"
    return result


def default_threshold(metric: str, *dtypes: torch.dtype) -> float:
    if metric == "rel_error":
        return max(REL_ERROR_BY_DTYPE.get(d, 1e-3) for d in dtypes) if dtypes else 1e-3
    return {"cosine": MIN_COSINE, "top1": MIN_TOP1, "logits": MIN_SQNR_DB}[metric]


def _structure_problem(reference: list[torch.Tensor], candidate: list[torch.Tensor]) -> str:
    if len(reference) != len(candidate):
        return f"output has {len(candidate)} tensors, reference {len(reference)}"
    for i, (r, c) in enumerate(zip(reference, candidate)):
        if tuple(r.shape) != tuple(c.shape):
            return f"output {i} has shape {tuple(c.shape)}, reference {tuple(r.shape)}"
    return ""


def _flat64(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in tensors if t.is_floating_point()] or [torch.zeros(0, dtype=torch.float64)])


def relative_error(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """‖candidate − reference‖₂ / ‖reference‖₂ in float64."""
    ref, cand = reference.to(torch.float64), candidate.to(torch.float64)
    denom = ref.norm().item()
    diff = (cand - ref).norm().item()
    return diff / denom if denom > 0 else (0.0 if diff == 0 else math.inf)


SQNR_CAP_DB = 300.0  # identical outputs: float64 cannot resolve more


def sqnr_db(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """10·log10(‖ref‖² / ‖cand − ref‖²): 20 dB is 10% relative error, 40 dB is 1%."""
    err = relative_error(reference, candidate)
    return SQNR_CAP_DB if err == 0 else min(SQNR_CAP_DB, -20.0 * math.log10(err))


@register_comparator("rel_error")
def _rel_error(reference, candidate, threshold):
    threshold = default_threshold("rel_error", *(c.dtype for c in candidate + reference)) if threshold is None else threshold
    value = relative_error(_flat64(reference), _flat64(candidate))
    return Correctness("rel_error", value, value <= threshold, threshold)


def _rows(t: torch.Tensor) -> torch.Tensor:
    # [..., C] -> [N, C] float64 on the CPU
    return t.detach().to("cpu", torch.float64).reshape(-1, t.shape[-1])


@register_comparator("cosine")
def _cosine(reference, candidate, threshold):
    threshold = MIN_COSINE if threshold is None else threshold
    cos = torch.nn.functional.cosine_similarity(_rows(reference[0]), _rows(candidate[0]), dim=-1)
    mean, low = cos.mean().item(), cos.min().item()
    return Correctness("cosine", mean, mean >= threshold, threshold, {"min": low, "rows": int(cos.numel())})


@register_comparator("top1")
def _top1(reference, candidate, threshold):
    threshold = MIN_TOP1 if threshold is None else threshold
    ref, cand = _rows(reference[0]), _rows(candidate[0])
    agreement = (ref.argmax(-1) == cand.argmax(-1)).double().mean().item()
    details = {"rel_error": relative_error(ref, cand), "rows": int(ref.shape[0])}
    return Correctness("top1", agreement, agreement >= threshold, threshold, details)


def logit_stats(reference: torch.Tensor, candidate: torch.Tensor) -> dict[str, float]:
    """SQNR (dB), mean KL(ref ‖ cand) in nats and next-token (argmax) agreement over positions."""
    ref, cand = _rows(reference), _rows(candidate)  # [positions, V]
    log_p = torch.log_softmax(ref, dim=-1)
    log_q = torch.log_softmax(cand, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1).mean().item()
    agreement = (ref.argmax(-1) == cand.argmax(-1)).double().mean().item()
    return {"sqnr_db": sqnr_db(ref, cand), "kl": max(kl, 0.0), "token_agreement": agreement, "positions": int(ref.shape[0])}


@register_comparator("logits")
def _logits(reference, candidate, threshold):
    threshold = MIN_SQNR_DB if threshold is None else threshold
    stats = logit_stats(reference[0], candidate[0])
    return Correctness("logits", stats["sqnr_db"], stats["sqnr_db"] >= threshold, threshold, stats)

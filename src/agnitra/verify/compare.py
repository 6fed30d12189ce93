"""How two outputs of one workload are compared: leaf by leaf, with named metrics and thresholds.

`compare` takes the reference's and a candidate's outputs, of any structure (tensors, tuples,
lists, dicts, ModelOutputs, numbers, strings, None: agnitra.verify.leaves); `compare_sets` the
outputs of several held-out input sets at once, each leaf's values pooled over the sets. A
structure that differs fails with the path of the leaf. Floating leaves: the named metric
(rel_error, cosine, top1, logits; `COMPARATORS`) judges the main leaf, the first floating one (for
the row metrics, the first with rows of two or more values); every other floating leaf must be
within a relative L2 error, the threshold under rel_error and `OTHER_LEAF_MAX_ERROR` under the
others. Integer and bool leaves must match exactly. NaN/Inf in the candidate fails; in the
reference nothing can be verified (`check_reference`). An output with no tensor or number is
"not compared", never passed. Thresholds default per metric and dtype (`default_threshold`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from agnitra.results import Correctness
from agnitra.verify.leaves import StructureMismatch, comparable_leaves, is_exact, nonfinite_count, paired_leaves

Comparator = Callable[[list[torch.Tensor], list[torch.Tensor], float | None], Correctness]
COMPARATORS: dict[str, Comparator] = {}

# Relative L2 error allowed between two implementations in a given precision (the looser of the
# two dtypes applies): fp32 leaves room for TF32 matmuls, 16-bit for different rounding orders.
REL_ERROR_BY_DTYPE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.float16: 1e-2, torch.bfloat16: 5e-2}
MIN_COSINE = 0.99  # embeddings: mean cosine similarity
MIN_TOP1 = 0.9  # classifiers: fraction of rows with the same argmax
MIN_SQNR_DB = 20.0  # decoders: logit signal-to-quantisation-noise ratio
# floating leaves besides the main one, under a metric other than rel_error: within 10% relative
# L2 error (20 dB SQNR, the decoders' bar), so a quantised model's extra outputs are judged as
# leniently as its main one
OTHER_LEAF_MAX_ERROR = 0.1
ROW_METRICS = ("cosine", "top1", "logits")
NOT_COMPARED = "not compared: the output has no tensors or numbers"
LISTED_LEAVES = 20  # per-leaf values kept in the details


@dataclass(frozen=True)
class Tolerances:
    """What a candidate must meet against the untouched model; None = the metric's default."""

    max_error: float | None = None  # relative L2 error (rel_error)
    min_cosine: float | None = None  # mean cosine similarity (embeddings)
    min_top1: float | None = None  # top-1 agreement (classifiers)
    min_sqnr_db: float | None = None  # logit SQNR (decoders)
    min_token_agreement: float | None = None  # next-token agreement (decoders); not required by default
    max_ppl_increase: float | None = None  # decoders with held-out text: relative perplexity rise (0.01 = +1%)
    min_retrieval: float | None = None  # embeddings on real sentences: share keeping their nearest neighbour (reported always)
    # decoders: teacher-forced positions compared, in windows of the generation length with a
    # fresh prompt each (the timed KV cache is never resized); None = one window
    check_positions: int | None = None

    def threshold(self, metric: str) -> float | None:
        return {"rel_error": self.max_error, "cosine": self.min_cosine, "top1": self.min_top1, "logits": self.min_sqnr_db, "perplexity": self.max_ppl_increase}.get(metric)


def register_comparator(name: str):
    def wrap(fn: Comparator) -> Comparator:
        COMPARATORS[name] = fn
        return fn

    return wrap


@dataclass
class _Leaf:
    """One leaf's values over all sets, as rows [N, last dim] on the CPU in their own dtypes."""

    reference: torch.Tensor
    candidate: torch.Tensor
    number: bool  # Python numbers: floats are judged as the float32 values they mostly come from


Pooled = dict[str, _Leaf]  # by path


def compare(metric: str, reference: Any, candidate: Any, threshold: float | None = None, tolerances: Tolerances | None = None) -> Correctness:
    """The candidate's output against the reference's, leaf by leaf."""
    return compare_sets(metric, [(reference, candidate)], threshold, tolerances)


def compare_sets(metric: str, outputs: list[tuple[Any, Any]], threshold: float | None = None, tolerances: Tolerances | None = None) -> Correctness:
    """(reference, candidate) outputs of several input sets, each leaf pooled over the sets."""
    if metric not in COMPARATORS:
        raise ValueError(f"unknown comparison '{metric}'; known: {', '.join(sorted(COMPARATORS))}")
    if threshold is None and tolerances is not None:
        threshold = tolerances.threshold(metric)
    try:
        pooled = _pooled(outputs)
    except StructureMismatch as exc:
        return _failed(metric, threshold, str(exc))
    if not pooled:
        return Correctness(metric, None, False, threshold, {"error": NOT_COMPARED}, status="not compared")
    problem = _reference_problem([leaf.reference for leaf in pooled.values()]) or _nonfinite_candidate(pooled) or _inexact(pooled)
    if problem:
        return _failed(metric, threshold, problem)
    result = _judge(metric, pooled, threshold)
    result.details.update(leaves=len(pooled), sets=len(outputs))
    agreement = result.details.get("token_agreement")
    if tolerances and tolerances.min_token_agreement is not None and agreement is not None and agreement < tolerances.min_token_agreement:
        result.passed = False
        result.details["failed"] = result.details["error"] = f"next-token agreement {agreement:.3f} < {tolerances.min_token_agreement}"
    return result


def check_reference(outputs: Any) -> str | None:
    """Why no candidate can be verified against these outputs of the original model (NaN/Inf in
    them), or None. `outputs`: one output of any structure, or a list of them (held-out sets)."""
    return _reference_problem([t for _, t in comparable_leaves(outputs)])


def _reference_problem(tensors: list[torch.Tensor]) -> str | None:
    bad = sum(nonfinite_count(t) for t in tensors)
    if not bad:
        return None
    return f"the original model's output has {bad} NaN/Inf values on the held-out inputs; no candidate can be verified against it"


def _failed(metric: str, threshold: float | None, error: str) -> Correctness:
    return Correctness(metric, None, False, threshold, {"error": error})


def _pooled(outputs: list[tuple[Any, Any]]) -> Pooled:
    by_path: dict[str, list] = {}
    for reference, candidate in outputs:
        for pair in paired_leaves(reference, candidate):
            by_path.setdefault(pair.path, []).append(pair)
    return {
        path: _Leaf(_rows_of([p.reference for p in pairs]), _rows_of([p.candidate for p in pairs]), pairs[0].number)
        for path, pairs in by_path.items()
    }


def _rows_of(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One leaf's values over the sets as rows [N, last dim] on the CPU, in their own dtype."""
    width = {t.shape[-1] if t.dim() else 1 for t in tensors}
    columns = width.pop() if len(width) == 1 else 1
    return torch.cat([t.detach().to("cpu").reshape(-1, columns) for t in tensors])


def _nonfinite_candidate(pooled: Pooled) -> str | None:
    for path, leaf in pooled.items():
        bad = nonfinite_count(leaf.candidate)
        if bad:
            return f"{path}: {bad} NaN/Inf values in the output"
    return None


def _inexact(pooled: Pooled) -> str | None:
    for path, leaf in pooled.items():
        if is_exact(leaf.reference):
            differ = int((leaf.reference != leaf.candidate).sum())
            if differ:
                return f"{path}: {differ} of {leaf.reference.numel()} values differ (integer and bool outputs must match exactly)"
    return None


def _judge(metric: str, pooled: Pooled, threshold: float | None) -> Correctness:
    """The named metric on the main floating leaf, relative L2 error on the others."""
    floating = {path: leaf for path, leaf in pooled.items() if not is_exact(leaf.reference)}
    main = _main_leaf(metric, floating)
    if main is None:  # no leaf the row metric applies to: every floating leaf by relative error
        metric, threshold = ("rel_error", None) if metric in ROW_METRICS else (metric, threshold)
        main = next(iter(floating), None)
    if main is None:  # integers and bools only, all equal
        return Correctness(metric, None, True, threshold, {"exact_leaves": len(pooled)})
    other_threshold = threshold if metric == "rel_error" else OTHER_LEAF_MAX_ERROR
    results = {
        path: _leaf(metric, leaf, threshold) if path == main else _leaf("rel_error", leaf, other_threshold)
        for path, leaf in floating.items()
    }
    result = results[main]
    if metric == "rel_error":  # every leaf under the same metric: the worst one speaks
        result = max(results.values(), key=lambda r: r.value)
    failed = next((path for path, r in results.items() if not r.passed), None)
    if failed:
        result.passed = False
        result.details["error"] = f"{failed}: {_shortfall(results[failed])}"
    if len(results) > 1:
        result.details["leaf_values"] = {path: r.value for path, r in list(results.items())[:LISTED_LEAVES]}
    return result


def _main_leaf(metric: str, floating: Pooled) -> str | None:
    if metric not in ROW_METRICS:
        return next(iter(floating), None)
    return next((path for path, leaf in floating.items() if leaf.reference.shape[-1] >= 2), None)


def _leaf(metric: str, leaf: _Leaf, threshold: float | None) -> Correctness:
    if threshold is None and leaf.number:
        threshold = default_threshold(metric, torch.float32)
    return COMPARATORS[metric]([leaf.reference], [leaf.candidate], threshold)


def _shortfall(result: Correctness) -> str:
    below = "<" if result.metric in ROW_METRICS else ">"
    return f"{result.metric} {result.value:.4g} {below} {result.threshold:.4g}"


# Lossy recipes on exploring inputs (sign-flipped, scaled, zeros, wide: bench.explore), far from what
# they were calibrated on: judged for an answer that differs (a frozen branch: relative error ~1),
# not for one a little less precise. The threshold is this much looser (logits: 20 dB lower).
EXPLORING_LOOSER = 10.0


def exploring_threshold(metric: str, threshold: float, lossy: bool) -> float:
    """The threshold an exploring set is judged by: the run's own, or for a lossy recipe the looser one."""
    if not lossy:
        return threshold
    if metric == "rel_error":
        return threshold * EXPLORING_LOOSER
    if metric == "logits":
        return threshold - 20.0
    return max(0.0, 1.0 - (1.0 - threshold) * (EXPLORING_LOOSER if metric == "cosine" else EXPLORING_LOOSER / 2))


def default_threshold(metric: str, *dtypes: torch.dtype) -> float:
    if metric == "rel_error":
        return max(REL_ERROR_BY_DTYPE.get(d, 1e-3) for d in dtypes) if dtypes else 1e-3
    return {"cosine": MIN_COSINE, "top1": MIN_TOP1, "logits": MIN_SQNR_DB}[metric]


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

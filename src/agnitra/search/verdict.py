"""The verdict of an optimize run, in one line: the answer against the baseline and the best peer,
or why the original model is returned, and the failure most candidates shared."""

from __future__ import annotations

from collections import Counter

from agnitra.results import BenchReport, CandidateResult, VariantResult
from agnitra.search.ranking import rank


def win_verdict(bench: BenchReport, chosen: VariantResult, peers: list[str], results: list[CandidateResult] | None = None) -> str:
    """One line: the answer against the baseline and against the best peer of the same run."""
    baseline = bench.variants[0]
    base_ms, ms = baseline.latency_ms.median, chosen.latency_ms.median
    c = chosen.correctness
    value = "" if c.value is None else f" {c.value:+.2%} (held-out)" if c.metric == "perplexity" else f" {c.value:.6g}"
    interval = f" ({chosen.speedup_interval[0]:.2f}-{chosen.speedup_interval[1]:.2f})" if chosen.speedup_interval else ""
    line = f"{chosen.name}: {base_ms / ms:.2f}x{interval} faster than the baseline ({base_ms:.3f} -> {ms:.3f} ms)"
    if chosen.faster_beyond_noise is False:
        line += " (within the noise in the final run, beyond it in its own search run)"
    against = _against_peers(bench, chosen, peers)
    searched = "" if any(v.name in peers for v in bench.variants[1:]) else _searched_compile(results or [], chosen)
    line += (against.replace(", no peer measured", "", 1) if searched else against) + searched
    line += f"; {c.metric}{value} within tolerance"
    if chosen.name in peers:
        line += f" (the peer '{chosen.name}' won the final run: its recipe is the answer{_best_own(bench, chosen, peers, results or [])})"
    return line


def _searched_compile(results: list[CandidateResult], chosen: VariantResult) -> str:
    """Where no compile mode ran in the final run (left out to fit the time): the fastest one of the
    search, in its own run."""
    compiled = [r for r in results if r.peer and r.peer.startswith("compile") and r.passed and r.speedup]
    if not compiled:
        return ""
    best = max(compiled, key=lambda r: r.speedup)
    return f"; the fastest compile mode, {best.peer}, ran {best.speedup:.2f}x in its own search run (not in the final run)"


def _best_own(bench: BenchReport, chosen: VariantResult, peers: list[str], results: list[CandidateResult]) -> str:
    """When a peer won: how close the best of the recipes the search found came to it."""
    own = [v for v in bench.variants[1:] if v.name not in peers and v.status == "ok" and v.latency_ms and v.correctness is not None and v.correctness.passed]
    if not own:
        ranked = [r for r in rank(results, "latency") if r.peer is None]
        if ranked:
            return "; the recipes the search found did not finish with correct outputs in the final run"
        passed = sum(r.passed for r in results)
        return "; none of the recipes the search found finished with correct outputs" if not passed else f"; none of the {passed} recipe(s) of the search that passed beat the baseline beyond the noise"
    best = min(own, key=lambda v: v.latency_ms.median)
    return f"; the best recipe the search found, {best.name}, ran at {best.latency_ms.median:.3f} ms ({chosen.latency_ms.median / best.latency_ms.median:.2f}x its speed)"


def _against_peers(bench: BenchReport, chosen: VariantResult, peers: list[str]) -> str:
    ran = [v for v in bench.variants if v.name in peers and v.name != chosen.name and v.status == "ok" and v.latency_ms]
    measured = [v for v in ran if v.correctness is None or v.correctness.passed]
    faster_but_wrong = [v for v in ran if v not in measured and v.latency_ms.median < chosen.latency_ms.median]
    wrong = "".join(f"; {v.name} was faster ({v.latency_ms.median:.3f} ms) but failed verification" for v in faster_but_wrong)
    if not measured:
        if chosen.name in peers:  # a peer is the answer
            return (", no other peer finished with correct outputs" if len(peers) > 1 else "") + wrong
        return (", no peer measured" if not peers else ", no peer finished with correct outputs") + wrong
    best = min(measured, key=lambda v: v.latency_ms.median)
    ratio = best.latency_ms.median / chosen.latency_ms.median
    if ratio >= 1:
        return f", {ratio:.2f}x faster than the best peer, {best.name} ({best.latency_ms.median:.3f} ms)" + wrong
    return f", {ratio:.2f}x the speed of the best peer, {best.name} ({best.latency_ms.median:.3f} ms), which is faster but not a recipe Agnitra can return" + wrong


def nothing_helped(results: list[CandidateResult], finalists: list[CandidateResult], bench: BenchReport) -> str:
    if not results:
        return "no candidate was measured (nothing applicable, or no budget); the original model is returned"
    if not finalists:
        passing = sum(r.passed for r in results)
        return f"none of {len(results)} candidates beat the baseline beyond the noise with correct outputs ({passing} passed verification); the original model is returned"
    said = [_final_said(bench, r.name) for r in finalists]
    return f"the best candidates did not beat the baseline in the final interleaved run ({'; '.join(s for s in said if s)}); the original model is returned"


def _final_said(bench: BenchReport, name: str) -> str:
    """How a finalist fared in the final run, in a few words."""
    v = next((v for v in bench.variants if v.name == name), None)
    if v is None or v.status != "ok":
        return f"{name}: {v.reason if v else 'not run'}"
    if v.correctness is not None and not v.correctness.passed:
        return f"{name}: failed verification"
    speedup = bench.variants[0].latency_ms.median / v.latency_ms.median if bench.variants[0].latency_ms else None
    interval = f" ({v.speedup_interval[0]:.2f}-{v.speedup_interval[1]:.2f})" if v.speedup_interval else ""
    return f"{name}: {speedup:.2f}x{interval}, not beyond the noise" if speedup else name


def screened_verdict(best: CandidateResult, results: list[CandidateResult], why: str) -> str:
    """One line for an answer taken from the search without a final run: its speedup in its own
    run beside the baseline, against the fastest compile mode that passed in the search."""
    low_high = best.speedup_interval
    # on a GPU a graph replay's speedup is taken against the search's reference baseline; its
    # interval, from its own run, is shown only where it holds that figure
    interval = f" ({low_high[0]:.2f}-{low_high[1]:.2f})" if low_high and low_high[0] <= best.speedup <= low_high[1] else ""
    line = f"{best.name}: {best.speedup:.2f}x{interval} faster than the baseline in its own run of the search"
    compiled = [r for r in results if r.peer and r.peer.startswith("compile") and r.passed and r.speedup and r is not best]
    if compiled:
        peer = max(compiled, key=lambda r: r.speedup)
        line += f", {best.speedup / peer.speedup:.2f}x the best compile mode measured, {peer.peer} ({peer.speedup:.2f}x in its run)"
    elif best.peer is None:
        line += ", no compile mode finished with correct outputs"
    for peer in [r for r in results if r.peer and not r.peer.startswith("compile") and r.status == "ok" and r.speedup]:
        if peer.passed:
            line += f"; {peer.peer} was faster ({peer.speedup:.2f}x in its run) but is not a recipe Agnitra can return" if peer.speedup > best.speedup else f", {best.speedup / peer.speedup:.2f}x {peer.peer} ({peer.speedup:.2f}x in its run)"
        else:
            line += f"; {peer.peer} ran {peer.speedup:.2f}x in its run but failed verification ({failure_reason(peer)})"
    if best.peer:
        line += f" (the peer '{best.peer}' is the answer: its recipe)"
    c = best.correctness
    return line + f"; {c.metric} {c.value:.6g} within tolerance; not confirmed in a final run ({why})"


def failure_reason(result: CandidateResult) -> str | None:
    """Why a candidate did not pass, reduced to the error itself (without the step it hit)."""
    if result.passed:
        return None
    if result.status != "ok":
        text = result.reason or result.status
    elif result.correctness is not None:
        details = result.correctness.details or {}
        text = details.get("error") or details.get("failed") or f"{result.correctness.metric} {result.correctness.value} outside the tolerance {result.correctness.threshold}"
    else:
        return None
    parts = [p for p in str(text).split(": ") if p]
    for i in reversed(range(len(parts) - 1)):  # the innermost error: 'setup: PatchError: step: RuntimeError: ...'
        if parts[i].endswith(("Error", "Exception", "Timeout")):
            return ": ".join(parts[i:])
    return str(text)


def common_failure(results: list[CandidateResult]) -> str:
    """When most candidates failed for one reason, that reason: a user fixes one thing."""
    reasons = [r for r in (failure_reason(c) for c in results) if r]
    if len(reasons) < 2:
        return ""
    reason, count = Counter(reasons).most_common(1)[0]
    if count * 2 < len(results):
        return ""
    return f"; {count} of {len(results)} candidates failed with: {reason}"

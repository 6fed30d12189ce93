"""The search loop: measure candidates within a budget, keep the record, pick the winner.

Each candidate runs in its own short interleaved harness run against the baseline, so its
speedup is a ratio measured under the same conditions. A candidate that raises, runs out of
memory, fails verification or runs past `candidate_timeout` is recorded with its reason and the
loop goes on. Every result is appended to `candidates.jsonl` in the run directory, so a killed
run resumes without measuring again what is done.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from agnitra.bench.harness import BenchConfig, Harness
from agnitra.bench.variants.eager import Eager
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.errors import AgnitraError
from agnitra.report.schema import CandidateResult, DeviceReport, own_memory_bytes, to_dict
from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy
from agnitra.verify import Tolerances
from agnitra.workloads.base import Workload

JOURNAL = "candidates.jsonl"


class CandidateTimeout(AgnitraError):
    pass


@dataclass
class SearchConfig:
    budget_s: float = 600.0
    candidate_timeout_s: float = 300.0
    runs: int | None = None  # per candidate run (default: 20 calls, or 2 generations)
    warmup: int | None = None
    tolerances: Tolerances = field(default_factory=Tolerances)
    run_dir: Path | None = None  # journal location; None: nothing kept
    resume: bool = False


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise CandidateTimeout in the main thread after `seconds` (SIGALRM; Unix main thread only)."""
    usable = seconds > 0 and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield False
        return

    def expire(signum, frame):
        raise CandidateTimeout(f"ran past the candidate timeout of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def evaluate(candidate: Candidate, workload: Workload, device: torch.device, device_report: DeviceReport, config: SearchConfig) -> CandidateResult:
    """Measure one recipe against the baseline in a short interleaved run; never raises."""
    recipe = candidate.recipe
    result = CandidateResult(name=recipe.name, recipe=recipe.to_dict(), key=recipe.key(), prior=candidate.prior, status="ok")
    decoder = workload.decoder is not None
    bench = BenchConfig(
        variants=[Eager(), RecipeVariant(recipe)],
        runs=config.runs or (2 if decoder else 20),
        warmup=config.warmup if config.warmup is not None else (1 if decoder else 3),
        op_breakdown=False, signature=False, energy=False, roofline=False, tolerances=config.tolerances,
    )
    t0 = time.perf_counter()
    try:
        with deadline(config.candidate_timeout_s):
            report = Harness(workload, device, device_report, bench).run()
    except CandidateTimeout as exc:
        result.status, result.reason = "timeout", str(exc)
        free_candidate(device)
        return _timed(result, t0)
    except Exception as exc:  # noqa: BLE001 - the harness records variant failures; this is the rest
        from agnitra.errors import first_line

        result.status, result.reason = "failed", first_line(exc)
        free_candidate(device)
        return _timed(result, t0)
    base, cand = report.variants
    result.status, result.reason = cand.status, cand.reason
    result.latency_ms, result.peak_memory_bytes, result.correctness, result.setup_s = cand.latency_ms, cand.peak_memory_bytes, cand.correctness, cand.setup_s
    result.model_bytes = cand.model_bytes
    if cand.status == "ok" and base.status == "ok":
        result.baseline_ms = base.latency_ms.median
        result.speedup = base.latency_ms.median / cand.latency_ms.median
    free_candidate(device)
    return _timed(result, t0)


def _timed(result: CandidateResult, t0: float) -> CandidateResult:
    result.eval_s = round(time.perf_counter() - t0, 2)
    return result


def free_candidate(device: torch.device) -> None:
    """Forget a finished candidate: its compiled code, and the memory it held.

    Every candidate compiles the same code objects (the model's forward, the decode step);
    TorchDynamo keeps a few compiled versions per code object and past that limit stops
    compiling (fullgraph) or silently runs eagerly. Resetting between candidates keeps each one
    compiled on its own.
    """
    import gc

    import torch._dynamo

    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def load_journal(run_dir: Path | None) -> dict[str, CandidateResult]:
    if run_dir is None or not (run_dir / JOURNAL).is_file():
        return {}
    done = {}
    for line in (run_dir / JOURNAL).read_text().splitlines():
        if line.strip():
            result = CandidateResult.from_dict(json.loads(line))
            done[result.key] = result
    return done


def _append(run_dir: Path | None, result: CandidateResult) -> None:
    if run_dir is None:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / JOURNAL, "a") as f:
        f.write(json.dumps(to_dict(result)) + "\n")


def search(
    strategy: Strategy,
    workload: Workload,
    device: torch.device,
    device_report: DeviceReport,
    config: SearchConfig,
    progress: Callable[[str, float], None] | None = None,
) -> list[CandidateResult]:
    """Ask, measure, tell, until the strategy is done or the budget is spent."""
    progress = progress or (lambda message, fraction: None)
    done = load_journal(config.run_dir) if config.resume else {}
    if config.run_dir is not None and not config.resume and (config.run_dir / JOURNAL).exists():
        (config.run_dir / JOURNAL).unlink()  # a fresh run starts a fresh journal
    results: list[CandidateResult] = []
    start = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= config.budget_s:
            break
        candidate = strategy.ask()
        if candidate is None:
            break
        progress(f"candidate {len(results) + 1}: {candidate.recipe.name}", min(0.95, elapsed / config.budget_s))
        if candidate.recipe.key() in done:
            result = done[candidate.recipe.key()]  # measured before the run was interrupted
        else:
            timeout = min(config.candidate_timeout_s, max(1.0, config.budget_s - elapsed + 30))
            result = evaluate(candidate, workload, device, device_report, _with_timeout(config, timeout))
            _append(config.run_dir, result)
        results.append(result)
        strategy.tell(candidate, result)
    return results


def _with_timeout(config: SearchConfig, timeout: float) -> SearchConfig:
    import dataclasses

    return dataclasses.replace(config, candidate_timeout_s=timeout)


def pareto_front(results: list[CandidateResult]) -> list[str]:
    """Passing candidates not dominated in (latency, the model's own memory, error)."""
    points = []
    for r in results:
        if not r.passed or r.latency_ms is None:
            continue
        error = _error_of(r)
        points.append((r.name, r.latency_ms.median, own_memory_bytes(r), error))
    front = []
    for name, lat, mem, err in points:
        dominated = any(
            (l2 <= lat and m2 <= mem and e2 <= err) and (l2 < lat or m2 < mem or e2 < err)
            for n2, l2, m2, e2 in points if n2 != name
        )
        if not dominated:
            front.append(name)
    return front


def _error_of(result: CandidateResult) -> float:
    """A 'lower is better' error from the correctness metric, for the Pareto comparison."""
    c = result.correctness
    if c is None or c.value is None:
        return 0.0
    if c.metric == "rel_error":
        return c.value
    if c.metric == "logits":
        return -c.value  # higher SQNR is better
    return 1.0 - c.value  # cosine, top-1 agreement

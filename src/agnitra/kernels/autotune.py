"""The autotuner: the best configuration of a kernel for a problem, checked, timed and remembered.

Every configuration tried is checked against the kernel's reference (computed in float64) before
it is timed; a configuration that fails to compile, runs out of resources or computes a wrong
answer is recorded with its reason and skipped. Timing: warm-up, then the median of repeated
runs with CUDA events, rotating through several input sets whose bytes exceed the L2 cache so the
figure is a DRAM figure; on the GPU the calls are captured in a CUDA graph, as they run in a
decode step, so a microsecond kernel is not timed by the host's launch overhead. Small spaces are searched exhaustively, large ones with Optuna's TPE over
the configuration parameters. The default configuration is always measured, and the search's
fastest few (with the kernel's refinements of them, `KernelSpec.refinements`: variants only the
device can judge, such as where a kernel lets the next one in under PDL) are re-timed head to head
with it (interleaved rounds) before one is chosen, so the choice is never slower than the default
in one measurement. Results go to the per-device
tuning cache and are reused; `refine` re-judges a cached choice against refinements added later,
without a new search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agnitra.errors import first_line
from agnitra.kernels.spec import KernelSpec
from agnitra.kernels.tuning_cache import TuningCache, cache_key
from agnitra.telemetry.timing import time_device_calls

EXHAUSTIVE_LIMIT = 48  # configurations; above this, TPE samples `max_trials` of them
TOLERANCE = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 2e-2}


@dataclass
class Trial:
    config: dict[str, Any]
    ms: float | None
    error: float | None  # relative L2 error against the float64 reference
    ok: bool
    reason: str = ""


@dataclass
class TuneResult:
    kernel: str
    shape: tuple[int, ...]
    dtype: str
    bucket: str
    best: dict[str, Any]
    best_ms: float
    default: dict[str, Any]
    default_ms: float | None
    strategy: str
    cached: bool = False
    trials: list[Trial] = field(default_factory=list)
    head_to_head: list[tuple[dict[str, Any], float]] = field(default_factory=list)  # (config, ms) of the finalists re-timed together

    @property
    def speedup_over_default(self) -> float | None:
        return self.default_ms / self.best_ms if self.default_ms and self.best_ms else None


def to_float64(inputs: tuple) -> tuple:
    return tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)


def _relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return math.inf
    denom = ref.norm().item()
    return (out - ref).norm().item() / denom if denom else (out - ref).norm().item()


def sets_past_l2(per_set_bytes: float, l2_bytes: int | None) -> int:
    """How many distinct copies of `per_set_bytes` cycle past the L2 cache (twice its size; 1 to 8)."""
    return 1 if not l2_bytes else min(8, max(1, math.ceil(2 * l2_bytes / max(1.0, per_set_bytes))))


def input_sets(spec: KernelSpec, shape, dtype, device: torch.device, l2_bytes: int | None) -> list[tuple]:
    """Enough distinct input sets that cycling through them does not run out of the L2 cache."""
    wanted = sets_past_l2(spec.bytes(shape, dtype), l2_bytes)
    return [spec.make_inputs(shape, dtype, device, seed) for seed in range(wanted)]


def check(spec: KernelSpec, config: dict, sets: list[tuple], reference: Any, dtype: torch.dtype) -> Trial:
    """One launch compared with the reference: an ok Trial with its error (no time), or the reason it failed."""
    try:
        error = _relative_error(spec.launch(*sets[0], config=config), reference)
    except Exception as exc:  # noqa: BLE001 - compile errors, out of resources: a record, not a crash
        return Trial(config, None, None, False, first_line(exc))
    if not error <= TOLERANCE.get(dtype, 1e-2):
        return Trial(config, None, error, False, f"wrong result: relative error {error:.3g}")
    return Trial(config, None, error, True)


def measure(spec: KernelSpec, config: dict, sets: list[tuple], reference: Any, dtype: torch.dtype, device: torch.device, runs: int, warmup: int) -> Trial:
    checked = check(spec, config, sets, reference, dtype)
    if not checked.ok:
        return checked
    try:
        for i in range(warmup):
            spec.launch(*sets[i % len(sets)], config=config)
        times = time_device_calls(lambda i: spec.launch(*sets[i % len(sets)], config=config), runs, device)
        return Trial(config, float(np.median(times)), checked.error, True)
    except Exception as exc:  # noqa: BLE001 - compile errors, out of resources: a record, not a crash
        return Trial(config, None, None, False, first_line(exc))


def timed_rounds(calls: list, runs: int, device: torch.device, rounds: int = 3) -> list[list[list[float]]]:
    """Times (ms) of `calls` (each takes the call's index) in `rounds` interleaved rounds of `runs`
    calls each, the order reversed every other round: [contender][round] -> samples."""
    times: list[list[list[float]]] = [[] for _ in calls]
    for r in range(rounds):
        order = range(len(calls)) if r % 2 == 0 else reversed(range(len(calls)))
        for i in order:
            times[i].append(time_device_calls(calls[i], runs, device))
    return times


def head_to_head(calls: list, runs: int, device: torch.device, rounds: int = 3) -> list[float]:
    """Median times (ms) of `calls` timed head to head (`timed_rounds`), so clock and temperature
    drift over a run (GPU boost falls as it heats) weighs on every contender alike."""
    return [float(np.median([t for samples in per_round for t in samples])) for per_round in timed_rounds(calls, runs, device, rounds)]


def confirm(spec: KernelSpec, configs: list[dict], sets: list[tuple], device: torch.device, runs: int, rounds: int = 3) -> list[float]:
    """Median times of `configs` timed head to head (`head_to_head`), so drift between trials taken
    minutes apart cannot pick the winner. Each config ran correctly before (its trial)."""
    return head_to_head([lambda j, c=c: spec.launch(*sets[j % len(sets)], config=c) for c in configs], runs, device, rounds)


CONFIRM_TOP = 3  # the search's fastest configurations re-timed against the default before one is chosen
DEFAULT_MARGIN = 0.02  # a challenger replaces the default only when it is this much faster head to head (run-to-run noise of a few-microsecond kernel)


def _within_noise(challenger_ms: float, incumbent_ms: float) -> bool:
    """A challenger timed head to head replaces the incumbent (the default, a cached choice) only when
    faster by DEFAULT_MARGIN."""
    return challenger_ms > incumbent_ms * (1 - DEFAULT_MARGIN)


def _search_space(configs: list[dict]) -> dict[str, list]:
    keys = sorted({k for c in configs for k in c})
    return {k: sorted({c.get(k) for c in configs}, key=lambda v: (v is None, str(v))) for k in keys}


def _tpe(configs: list[dict], evaluate, max_trials: int, seed: int = 0) -> None:
    """TPE over the configs' keys until `max_trials` distinct configs have been timed. A sampled
    combination that is no config (the keys' product is sparse: most combinations are invalid) is
    projected onto the config agreeing with it on the most keys (`_nearest_config`), so every
    sample times a config; rejecting them instead left TPE 3 valid samples in 300 on the int8
    GEMV's space at 4096x4096."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = _search_space(configs)
    timed: set[tuple] = set()

    def objective(trial):
        chosen = {k: trial.suggest_categorical(k, values) for k, values in space.items()}
        config = _nearest_config(chosen, configs)
        timed.add(tuple(sorted(config.items())))
        t = evaluate(config)
        return t.ms if t.ok else float("inf")

    def stop(study, trial):
        if len(timed) >= min(max_trials, len(configs)):
            study.stop()

    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=max_trials * 5, callbacks=[stop])


def _nearest_config(chosen: dict, configs: list[dict]) -> dict:
    """The config that agrees with `chosen` on the most keys (a key a config lacks agrees with None),
    the first such in the list."""
    return max(configs, key=lambda c: sum(c.get(k) == v for k, v in chosen.items()))


def tune(
    spec: KernelSpec,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    *,
    runs: int = 20,
    warmup: int = 5,
    max_trials: int = 40,
    strategy: str = "auto",  # auto | exhaustive | tpe
    cache: TuningCache | None = None,
    force: bool = False,
    l2_bytes: int | None = None,
    progress=None,
    sets: list[tuple] | None = None,
) -> TuneResult:
    """The fastest checked configuration of `spec` for `shape` (see the module docstring). `sets`:
    the input sets to time on, when the caller has made them already (`input_sets`)."""
    bucket = spec.bucket(shape)
    key = cache_key(spec.name, bucket, dtype)
    default = spec.default_config(shape, dtype)
    if cache is not None and not force:
        hit = cache.get(key)
        if hit:
            return TuneResult(spec.name, tuple(shape), str(dtype).replace("torch.", ""), bucket, hit["config"], hit["ms"], default, hit.get("default_ms"), hit.get("strategy", ""), cached=True)
    sets = sets or input_sets(spec, shape, dtype, device, l2_bytes)
    reference = spec.reference(*to_float64(sets[0]))
    configs = spec.configs(shape, dtype)
    trials: dict[tuple, Trial] = {}

    def evaluate(config: dict) -> Trial:
        k = tuple(sorted(config.items()))
        if k not in trials:
            trials[k] = measure(spec, config, sets, reference, dtype, device, runs, warmup)
            if progress:
                progress(trials[k])
        return trials[k]

    default_trial = evaluate(default)
    # a budget of trials that covers the space tries it all (TPE would sample repeats and miss some)
    small = len(configs) <= max(EXHAUSTIVE_LIMIT, max_trials)
    chosen = "exhaustive" if strategy == "exhaustive" or (strategy == "auto" and small) else "tpe"
    if chosen == "exhaustive":
        for config in configs:
            evaluate(config)
    else:
        _tpe(configs, evaluate, max_trials)
    ok = [t for t in trials.values() if t.ok]
    if not ok:
        reasons = "; ".join(sorted({t.reason for t in trials.values()}))[:500]
        raise RuntimeError(f"no configuration of {spec.name} ran correctly for shape {shape} {dtype}: {reasons}")
    finalists = sorted(ok, key=lambda t: t.ms)[:CONFIRM_TOP]
    for finalist in list(finalists) if spec.refinements is not None else ():
        for variant in spec.refinements(finalist.config, device):
            trial = evaluate(variant)
            if trial.ok and trial not in finalists:
                finalists.append(trial)
    if default_trial.ok and default_trial not in finalists:
        finalists.append(default_trial)
    confirmed = confirm(spec, [t.config for t in finalists], sets, device, runs)
    best_ms, best = min(zip(confirmed, finalists), key=lambda pair: pair[0])
    default_ms = confirmed[finalists.index(default_trial)] if default_trial.ok else None
    if default_ms is not None and _within_noise(best_ms, default_ms):  # keep the default
        best_ms, best = default_ms, default_trial
    result = TuneResult(spec.name, tuple(shape), str(dtype).replace("torch.", ""), bucket, best.config, best_ms, default, default_ms, chosen,
                        trials=list(trials.values()), head_to_head=[(t.config, ms) for t, ms in zip(finalists, confirmed)])
    if cache is not None:
        cache.put(key, {"config": best.config, "ms": best_ms, "default_ms": default_ms, "strategy": chosen, "shape": list(shape), "trials": len(trials)})
    return result


def refine(
    spec: KernelSpec,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    *,
    cache: TuningCache,
    runs: int = 20,
    warmup: int = 5,
    l2_bytes: int | None = None,
    sets: list[tuple] | None = None,
) -> TuneResult | None:
    """A cached choice re-judged against its refinements (`KernelSpec.refinements`: variants added after
    it was tuned, or only ever tried on finalists), without a new search: each checked, timed head to
    head with the choice, and the cache entry replaced only when one beats it by DEFAULT_MARGIN. None
    when nothing is cached for the problem or the kernel has no refinements."""
    key = cache_key(spec.name, spec.bucket(shape), dtype)
    hit = cache.get(key)
    if not hit or spec.refinements is None:
        return None
    sets = sets or input_sets(spec, shape, dtype, device, l2_bytes)
    reference = spec.reference(*to_float64(sets[0]))
    trials = [measure(spec, config, sets, reference, dtype, device, runs, warmup) for config in [hit["config"], *spec.refinements(hit["config"], device)]]
    contenders = [t for t in trials if t.ok]
    if not contenders or contenders[0] is not trials[0]:
        raise RuntimeError(f"the cached configuration of {spec.name} for {shape} no longer runs correctly: {trials[0].reason}")
    confirmed = confirm(spec, [t.config for t in contenders], sets, device, runs)
    best_ms, best = min(zip(confirmed, contenders), key=lambda pair: pair[0])
    if _within_noise(best_ms, confirmed[0]):  # the cached choice stays
        best_ms, best = confirmed[0], contenders[0]
    if best is not contenders[0]:
        cache.put(key, {**hit, "config": best.config, "ms": best_ms, "refined_from": hit["config"]})
    default = spec.default_config(shape, dtype)
    return TuneResult(spec.name, tuple(shape), str(dtype).replace("torch.", ""), spec.bucket(shape), best.config, best_ms, default, hit.get("default_ms"),
                      "refine", trials=trials, head_to_head=[(t.config, ms) for t, ms in zip(contenders, confirmed)])


def cached_config(spec: KernelSpec, shape, dtype, cache: TuningCache | None) -> dict:
    """The tuned configuration for this problem when there is one, else the kernel's default."""
    if cache is not None:
        hit = cache.get(cache_key(spec.name, spec.bucket(shape), dtype))
        if hit:
            return hit["config"]
    return spec.default_config(shape, dtype)

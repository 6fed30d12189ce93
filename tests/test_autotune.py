"""The autotuner and the per-device tuning cache, with pure-PyTorch stand-in kernels."""

from __future__ import annotations

import json
import multiprocessing as mp
import time

import pytest
import torch

from agnitra.kernels.autotune import head_to_head, tune
from agnitra.kernels.spec import KernelSpec
from agnitra.kernels.tuning_cache import TuningCache, cache_key


def _launch(a, b, config):
    if config["mode"] == "raise":
        raise RuntimeError("out of resource: shared memory")
    time.sleep(config["sleep_ms"] / 1e3)  # the configuration's 'speed'
    out = a @ b
    return out * 1.5 if config["mode"] == "wrong" else out


def _spec(configs, default):
    return KernelSpec(
        name="toy_matmul",
        configs=lambda shape, dtype: configs,
        default_config=lambda shape, dtype: default,
        launch=_launch,
        reference=lambda a, b: a @ b,
        make_inputs=lambda shape, dtype, device, seed: tuple(torch.randn(shape[0], shape[0], generator=torch.Generator().manual_seed(seed)).to(dtype) for _ in range(2)),
        flops=lambda shape: 2 * shape[0] ** 3,
        bytes=lambda shape, dtype: 3 * shape[0] ** 2 * 4,
        bucket=lambda shape: f"n{shape[0]}",
    )


CONFIGS = [
    {"mode": "ok", "sleep_ms": 3.0},
    {"mode": "ok", "sleep_ms": 0.2},  # the fastest correct one
    {"mode": "wrong", "sleep_ms": 0.0},  # faster still, but wrong
    {"mode": "raise", "sleep_ms": 0.0},
]


def test_exhaustive_picks_the_fastest_correct_config(tmp_path):
    cache = TuningCache(tmp_path, "sig")
    result = tune(_spec(CONFIGS, CONFIGS[0]), (16,), torch.float32, torch.device("cpu"), runs=5, warmup=1, cache=cache)
    assert result.strategy == "exhaustive" and not result.cached
    assert result.best == {"mode": "ok", "sleep_ms": 0.2}
    reasons = {t.config["mode"]: t.reason for t in result.trials if not t.ok}
    assert "relative error" in reasons["wrong"] and "out of resource" in reasons["raise"]
    assert result.best_ms <= result.default_ms  # never slower than the default
    assert result.speedup_over_default > 3


def test_cached_result_is_reused_without_measuring(tmp_path):
    cache = TuningCache(tmp_path, "sig")
    spec = _spec(CONFIGS, CONFIGS[0])
    first = tune(spec, (16,), torch.float32, torch.device("cpu"), runs=3, warmup=1, cache=cache)
    calls = []
    counted = _spec(CONFIGS, CONFIGS[0])
    object.__setattr__(counted, "launch", lambda *a, config: calls.append(config) or _launch(*a, config))
    again = tune(counted, (16,), torch.float32, torch.device("cpu"), cache=cache)
    assert again.cached and again.best == first.best and calls == []
    forced = tune(counted, (16,), torch.float32, torch.device("cpu"), runs=2, warmup=0, cache=cache, force=True)
    assert not forced.cached and calls
    other_bucket = tune(spec, (24,), torch.float32, torch.device("cpu"), runs=2, warmup=0, cache=cache)
    assert not other_bucket.cached  # another shape bucket is tuned on its own


def test_default_config_wins_when_nothing_beats_it(tmp_path):
    configs = [{"mode": "ok", "sleep_ms": 0.0}, {"mode": "ok", "sleep_ms": 3.0}]
    result = tune(_spec(configs, configs[0]), (8,), torch.float32, torch.device("cpu"), runs=5, warmup=1)
    assert result.best == configs[0]


@pytest.mark.parametrize("challenger_ms,chosen", [(0.99, "default"), (0.95, "challenger")])
def test_a_challenger_must_beat_the_default_by_the_margin(monkeypatch, challenger_ms, chosen):
    """Head to head, a configuration within DEFAULT_MARGIN of the default is noise: the default stays."""
    from agnitra.kernels import autotune

    configs = [{"mode": "ok", "sleep_ms": 0.0, "name": "default"}, {"mode": "ok", "sleep_ms": 0.0, "name": "challenger"}]
    monkeypatch.setattr(autotune, "confirm", lambda spec, cfgs, *a, **k: [1.0 if c["name"] == "default" else challenger_ms for c in cfgs])
    result = tune(_spec(configs, configs[0]), (8,), torch.float32, torch.device("cpu"), runs=2, warmup=0)
    assert result.best["name"] == chosen and result.best_ms <= result.default_ms


def test_a_lucky_trial_loses_the_head_to_head_with_the_default():
    """A configuration fast only while its own trial ran (drift, another process) is re-timed
    against the default before it is chosen: the choice is the one faster in one measurement."""
    configs = [{"mode": "ok", "sleep_ms": 1.0, "name": "default"}, {"mode": "ok", "sleep_ms": 2.0, "name": "lucky"}]
    calls = {"lucky": 0}

    def launch(a, b, config):
        if config["name"] == "lucky":
            calls["lucky"] += 1
            if calls["lucky"] <= 7:  # its check, warm-up and trial: 0 ms; afterwards 2 ms
                return a @ b
        return _launch(a, b, config)

    spec = _spec(configs, configs[0])
    object.__setattr__(spec, "launch", launch)
    result = tune(spec, (8,), torch.float32, torch.device("cpu"), runs=5, warmup=1)
    lucky = next(t for t in result.trials if t.config["name"] == "lucky")
    assert lucky.ms < next(t for t in result.trials if t.config["name"] == "default").ms  # it won the search
    assert result.best["name"] == "default" and result.best_ms <= result.default_ms  # and lost the head-to-head


def test_refinements_of_the_finalists_are_checked_timed_and_can_win():
    """`KernelSpec.refinements`: each search finalist's variants (outside the searched space) are
    checked and timed with the finalists; a faster correct variant is chosen, a wrong one never."""
    import dataclasses

    configs = [{"mode": "ok", "sleep_ms": 3.0}, {"mode": "ok", "sleep_ms": 1.0}]
    seen = []

    def refinements(config, device):
        seen.append(dict(config))
        return [{**config, "sleep_ms": 0.0}, {**config, "mode": "wrong", "sleep_ms": 0.0}] if config["sleep_ms"] == 1.0 else []

    spec = dataclasses.replace(_spec(configs, configs[0]), refinements=refinements)
    result = tune(spec, (8,), torch.float32, torch.device("cpu"), runs=5, warmup=1)
    assert {"mode": "ok", "sleep_ms": 1.0} in seen and {"mode": "ok", "sleep_ms": 3.0} in seen  # every finalist asked
    assert result.best == {"mode": "ok", "sleep_ms": 0.0}
    assert any(t.config["mode"] == "wrong" and not t.ok and "relative error" in t.reason for t in result.trials)
    assert any(config == result.best for config, _ in result.head_to_head)


def test_refine_rejudges_a_cached_choice_against_its_refinements(tmp_path):
    """`autotune.refine`: the cached choice and its refinements checked and timed head to head; the
    entry replaced only by a correct refinement faster by the margin (and says what it replaced);
    nothing cached or no refinements: None; a cached choice that no longer runs: an error."""
    import dataclasses

    from agnitra.kernels.autotune import refine

    cache = TuningCache(tmp_path, "sig")
    slow, fast = {"mode": "ok", "sleep_ms": 2.0}, {"mode": "ok", "sleep_ms": 0.0}
    spec = dataclasses.replace(_spec([slow], slow), refinements=lambda c, d: [fast, {"mode": "wrong", "sleep_ms": 0.0}] if c == slow else [])
    cpu = torch.device("cpu")
    assert refine(spec, (8,), torch.float32, cpu, cache=cache) is None  # nothing cached
    tune(spec, (8,), torch.float32, cpu, runs=2, warmup=0, cache=cache, strategy="exhaustive")
    key = cache_key(spec.name, spec.bucket((8,)), torch.float32)
    cache.put(key, {**cache.get(key), "config": slow})  # as if tuned before the refinement existed
    result = refine(spec, (8,), torch.float32, cpu, cache=cache, runs=3, warmup=1)
    assert result.best == fast and cache.get(key)["config"] == fast and cache.get(key)["refined_from"] == slow
    assert any(t.config["mode"] == "wrong" and not t.ok for t in result.trials)
    again = refine(spec, (8,), torch.float32, cpu, cache=cache, runs=3, warmup=1)  # nothing beats it now
    assert again.best == fast and cache.get(key)["config"] == fast
    assert refine(dataclasses.replace(spec, refinements=None), (8,), torch.float32, cpu, cache=cache) is None
    cache.put(key, {**cache.get(key), "config": {"mode": "raise", "sleep_ms": 0.0}})
    with pytest.raises(RuntimeError, match="no longer runs correctly"):
        refine(spec, (8,), torch.float32, cpu, cache=cache, runs=2, warmup=0)


def test_pdl_trigger_refinements_only_where_pdl_runs(monkeypatch):
    """The GEMV specs' refinement: the other PDL trigger point ("wait"), only on a GPU that launches
    with PDL and only for a configuration that leaves the point to the default; int4 only for the
    kernels that take PDL (rows, tc). Registered on the GEMVs the decode step runs."""
    from agnitra.kernels import pdl
    from agnitra.kernels.spec import get_kernel

    monkeypatch.setattr(pdl, "pdl_supported", lambda device: device.type == "cuda")
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    config = {"BLOCK_N": 8, "BLOCK_K": 512, "SPLIT_K": 1}
    assert pdl.pdl_trigger_refinements(config, cuda) == [{**config, "PDL": "wait"}]
    assert pdl.pdl_trigger_refinements(config, cpu) == []
    assert pdl.pdl_trigger_refinements({**config, "PDL": False}, cuda) == [] and pdl.pdl_trigger_refinements({**config, "PDL": "wait"}, cuda) == []
    int4 = get_kernel("int4_gemv").refinements
    assert int4({**config, "KERNEL": "tc"}, cuda) == [{**config, "KERNEL": "tc", "PDL": "wait"}] and int4({**config, "KERNEL": "words"}, cuda) == []
    # the tensor-core kernel with its prefetch: x read in the step that uses it, over steps of 256 features at least
    tc = {**config, "KERNEL": "tc", "BLOCK_K": 128, "PREFETCH": True}
    assert int4(tc, cuda)[1] == {**tc, "X_NOW": True, "BLOCK_K": 256, "maxnreg": 128} and int4(tc, cpu) == []
    for name in ("int8_gemv", "decode_gemv", "decode_gemv_gated"):
        assert get_kernel(name).refinements(config, cuda) == [{**config, "PDL": "wait"}], name
    assert get_kernel("int8_tiled").refinements is None and get_kernel("decode_attention").refinements is None


def test_head_to_head_interleaves_rounds_in_alternating_order():
    """Contenders timed in rounds, the order reversed every other round (a b | b a | a b): a clock
    that drifts over the run weighs on both; each median comes from its own calls."""
    log = []

    def contender(name, ms):
        def call(i):
            log.append(name)
            time.sleep(ms / 1e3)
        return call

    slow, fast = head_to_head([contender("a", 3.0), contender("b", 1.0)], runs=4, device=torch.device("cpu"), rounds=3)
    assert slow > fast > 0.5
    blocks = [name for i, name in enumerate(log) if i == 0 or log[i - 1] != name]
    assert blocks == ["a", "b", "a", "b"]  # a b, b a, a b: adjacent runs of one contender merge
    assert log.count("a") == log.count("b") >= 3 * 4


def test_large_spaces_use_tpe_and_find_a_fast_config():
    configs = [{"mode": "ok", "sleep_ms": float(s)} for s in range(1, 60)] + [{"mode": "ok", "sleep_ms": 0.0}]
    result = tune(_spec(configs, configs[20]), (8,), torch.float32, torch.device("cpu"), runs=2, warmup=0, max_trials=25)
    assert result.strategy == "tpe"
    assert len(result.trials) <= 26 + 1
    assert result.best["sleep_ms"] <= 10  # TPE moves towards the fast end of the space


def test_tpe_times_its_budget_of_distinct_configs_in_a_sparse_space():
    """Most combinations of the keys' values are no config (as in the GEMV spaces): TPE still times
    max_trials distinct configs (a sampled combination is projected onto the nearest config), where
    rejecting the invalid samples timed a handful."""
    import itertools

    configs = [{"mode": "ok", "sleep_ms": 0.02 * (a % 3), "a": a, "b": b, "c": c, "d": d}
               for a, b, c, d in itertools.product(range(6), repeat=4) if (a + 2 * b + 3 * c + 5 * d) % 23 == 0]
    combos = 6 ** 4 * 3  # a, b, c, d and the three sleeps
    assert 40 <= len(configs) <= combos // 20  # at most 5% of the keys' product is a config
    result = tune(_spec(configs, configs[0]), (8,), torch.float32, torch.device("cpu"), runs=1, warmup=0, max_trials=24)
    assert result.strategy == "tpe"
    assert 24 <= len(result.trials) <= 25  # the budget, and the default beside it
    assert all(t.config in configs for t in result.trials)


def test_all_configs_failing_is_an_error():
    configs = [{"mode": "raise", "sleep_ms": 0.0}, {"mode": "wrong", "sleep_ms": 0.0}]
    with pytest.raises(RuntimeError, match="no configuration of toy_matmul ran correctly"):
        tune(_spec(configs, configs[0]), (8,), torch.float32, torch.device("cpu"), runs=1, warmup=0)


def _writer(args):
    cache_dir, worker = args
    cache = TuningCache(cache_dir, "sig")
    for i in range(20):
        cache.put(cache_key("k", f"w{worker}_{i}", torch.float16), {"config": {"BLOCK": i}, "ms": float(i)})


def test_concurrent_writers_lose_nothing(tmp_path):
    with mp.get_context("spawn").Pool(4) as pool:
        pool.map(_writer, [(str(tmp_path), w) for w in range(4)])
    cache = TuningCache(tmp_path, "sig")
    entries = cache.entries()
    assert len(entries) == 80
    assert json.loads(cache.path.read_text())["version"] == 1
    assert entries[cache_key("k", "w3_19", torch.float16)]["config"] == {"BLOCK": 19}


def test_corrupt_cache_file_is_ignored(tmp_path):
    cache = TuningCache(tmp_path, "sig")
    cache.path.parent.mkdir(parents=True)
    cache.path.write_text("{torn")
    assert cache.get("anything") is None
    cache.put("k", {"config": {}, "ms": 1.0})
    assert cache.get("k")["ms"] == 1.0


def test_a_trial_budget_covering_the_space_tries_every_config():
    # the nearest rival sleeps 3 ms: a loaded 2-core VM's noise (the other xdist worker) outgrew 0.5 ms
    configs = [{"mode": "ok", "sleep_ms": 3.0 + float(s) / 2} for s in range(49)] + [{"mode": "ok", "sleep_ms": 0.0}]
    result = tune(_spec(configs, configs[20]), (8,), torch.float32, torch.device("cpu"), runs=1, warmup=0, max_trials=50)
    assert result.strategy == "exhaustive" and len(result.trials) == 50
    assert result.best["sleep_ms"] == 0.0

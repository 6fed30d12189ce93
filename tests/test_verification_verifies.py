"""Verification verifies: held-out inputs, another batch size, a NaN baseline, noise, a busy machine.

Each test runs the harness on the CPU with a model built to catch one way a wrong candidate
passed before (a frozen branch, a fixed batch, a NaN reference, a 1.00x "win") and checks what
the report says. Nothing is timed: only verdicts and reasons are asserted.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time

import math

import numpy as np
import pytest
import torch

from agnitra import api
from agnitra.bench.harness import BenchConfig, Harness
from agnitra.bench.heldout import baseline_problem
from agnitra.bench.noise import faster_beyond_noise
from agnitra.bench.variants.base import Prepared, Variant
from agnitra.workloads.base import like_inputs
from agnitra.workloads.registry import BuildOptions, build_workload

EXAMPLE = torch.randn(2, 8, generator=torch.Generator().manual_seed(3))  # its sum is positive


class Wrapped(Variant):
    """A copy of the model with `change(output, *inputs)` applied to what it returns: a
    deliberately wrong (or fragile) candidate; `change=None` is a correct one."""

    def __init__(self, name: str, change=None) -> None:
        self.name, self.change = name, change

    def prepare(self, workload, device):
        model, change = copy.deepcopy(workload.model), self.change

        def call(*inputs):
            output = model(*inputs)
            return change(output, *inputs) if change else output

        return Prepared(call=call)


@pytest.fixture(scope="module")
def device_report():
    return api.describe_device(torch.device("cpu"))


def bench(model, inputs, variants, device_report, **config):
    """An interleaved run of `variants` (the first is the reference), built for speed."""
    workload, device = api.prepare_workload(model, inputs, device="cpu")
    options = dict(runs=2, warmup=0, op_breakdown=False, signature=False, roofline=False, energy=False, load_probe_s=0.0)
    return Harness(workload, device, device_report, BenchConfig(variants=variants, **{**options, **config})).run()


class Branch(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


class BatchTwoOnly(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] != 2:
            raise ValueError("this model takes batch 2 only")
        return x * 2


def test_a_frozen_branch_is_refused_or_fails_on_the_exploring_inputs(device_report):
    """The ONNX export that freezes `x.sum() > 0` is refused before it is built (the probe saw the
    value read, the export's trace froze it at that line); a candidate that froze the branch some
    other way passes the held-out sets (they echo the example) and fails on the sign-flipped ones."""
    positive = EXAMPLE.abs() + 1  # held-out sets derived from it keep its sign
    frozen = Wrapped("frozen", lambda output, x: x * 2)
    report = bench(Branch(), (positive,), ["eager", "onnxruntime", frozen, Wrapped("copy")], device_report)
    ort = report.variant("onnxruntime")
    assert ort.status == "skipped" and "froze the value the model reads from its inputs at test_verification_verifies.py:64" in ort.reason
    failed = report.variant("frozen").correctness
    assert not failed.passed and failed.details["error"].startswith("on the sign-flipped inputs: output: rel_error")
    assert failed.details["exploring"]["sign-flipped"]["value"] > 0.1
    assert report.variant("copy").correctness.passed and report.variant("copy").correctness.value == 0.0
    verification = report.conditions["verification"]
    assert verification["held_out"].startswith("3 sets derived from the example inputs")
    assert verification["other_shape"] == "batch 3 (the example's is 2)"
    assert verification["exploring"]["sign-flipped"] == "checked"
    assert "bool(tensor) at test_verification_verifies.py:64" in verification["behaviour"]


def test_a_candidate_that_runs_only_at_the_example_batch_fails(device_report):
    def batch_two(output, x):
        if x.shape[0] != 2:
            raise RuntimeError("compiled for batch 2")
        return output

    report = bench(torch.nn.Linear(8, 4), (EXAMPLE,), ["eager", Wrapped("fixed", batch_two), Wrapped("copy")], device_report)
    fixed = report.variant("fixed")
    assert not fixed.correctness.passed
    assert fixed.reason == "verification: fails at batch 3, which the original accepts: RuntimeError: compiled for batch 2"
    assert fixed.correctness.details["shape_check"] == {"batch": 3, "checked": True, "said": "batch 3 (the example's is 2)", "passed": False}
    copy_check = report.variant("copy").correctness
    assert copy_check.passed and copy_check.details["shape_check"]["passed"] is True


def test_a_candidate_wrong_only_at_another_batch_fails(device_report):
    def off_elsewhere(output, x):
        return output if x.shape[0] == 2 else output * 1.5

    report = bench(torch.nn.Linear(8, 4), (EXAMPLE,), ["eager", Wrapped("off", off_elsewhere)], device_report)
    off = report.variant("off")
    assert not off.correctness.passed
    assert off.reason == "verification: at batch 3: output: rel_error 0.5 > 0.001"


def test_no_other_shape_where_the_original_takes_only_its_batch(device_report):
    report = bench(BatchTwoOnly(), (EXAMPLE,), ["eager", Wrapped("copy")], device_report)
    said = report.conditions["verification"]["other_shape"]
    assert said.startswith("not checked: the original model does not take another batch size")
    assert "batch 3: ValueError: this model takes batch 2 only" in said and "batch 4:" in said
    check = report.variant("copy").correctness
    assert check.passed and check.details["shape_check"]["checked"] is False


def test_decoders_are_checked_on_teacher_forced_logits_not_another_shape(device_report):
    workload = build_workload("tinylm", BuildOptions(size="tiny", tokens=4, seq_len=4))
    config = BenchConfig(variants=["eager", "eager"], runs=1, warmup=0, op_breakdown=False, signature=False, roofline=False, energy=False, load_probe_s=0.0)
    report = Harness(workload, torch.device("cpu"), device_report, config).run()
    assert report.variants[1].correctness.passed and report.variants[1].correctness.metric == "logits"
    assert report.conditions["verification"]["other_shape"].startswith("not checked: decoders are verified on teacher-forced logits")
    assert report.conditions["verification"]["held_out"].startswith("teacher-forced logits over 4 positions")


def test_a_nan_baseline_is_diagnosed_and_nothing_verified_against_it(device_report):
    class NaNModel(torch.nn.Module):
        def forward(self, x):
            return torch.log(-x.abs() - 1)  # NaN everywhere

    message = "the original model's output has 48 NaN/Inf values on the held-out inputs; no candidate can be verified against it"
    report = bench(NaNModel(), (EXAMPLE,), ["eager", Wrapped("copy")], device_report)
    reference, copy_run = report.variant("eager"), report.variant("copy")
    assert reference.correctness.status == "reference" and not reference.correctness.passed
    assert reference.correctness.details["error"] == message
    assert not copy_run.correctness.passed and copy_run.reason == f"verification: {message}"
    assert message in report.notes and report.conditions["verification"]["reference_problem"] == message
    workload, _ = api.prepare_workload(NaNModel(), (EXAMPLE,), device="cpu")
    assert baseline_problem(workload) == message  # what the optimize loop can end a run with
    healthy, _ = api.prepare_workload(torch.nn.Linear(8, 4), (EXAMPLE,), device="cpu")
    assert baseline_problem(healthy) is None


def test_held_out_inputs_keep_dtypes_ranges_and_masks():
    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(10, 4)

        def forward(self, ids, mask, scale):
            return self.table(ids) * mask[..., None] * scale

    ids = torch.tensor([[0, 9, 3, 4], [5, 6, 7, 8]])
    padded = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])  # right padding: no holes
    example = (ids, padded, torch.rand(2, 4, 1) + 0.5)
    workload, _ = api.prepare_workload(Embed(), example, device="cpu")
    held_out = workload.inputs(10_000)
    assert [t.dtype for t in held_out] == [t.dtype for t in example] and [t.shape for t in held_out] == [t.shape for t in example]
    assert not torch.equal(held_out[0], ids) and 0 <= held_out[0].min() and held_out[0].max() <= 9
    assert torch.equal(held_out[1], padded)  # a mask keeps its pattern
    assert 0.5 <= held_out[2].min() and held_out[2].max() <= 1.5  # one sign: the example's range
    assert torch.equal(workload.inputs(10_000)[2], held_out[2])  # seeded: every variant sees the same
    bigger = like_inputs(example, 1, batch=(2, 3))
    assert [t.shape[0] for t in bigger] == [3, 3, 3] and torch.equal(bigger[1], padded[[0, 1, 0]])


def test_derived_inputs_the_original_rejects_are_left_out(device_report):
    class OnlyItsExample(torch.nn.Module):
        def forward(self, x):
            if not torch.equal(x, EXAMPLE):
                raise ValueError("unexpected input")
            return x + 1

    report = bench(OnlyItsExample(), (EXAMPLE,), ["eager", Wrapped("copy")], device_report)
    assert report.variant("copy").correctness.passed
    assert report.conditions["verification"]["held_out"].startswith("the example inputs only")
    assert any(n.startswith("held-out inputs: a set derived from the example inputs was left out") for n in report.notes)


def _rounds(speedup: float, noise: float, seed: int, drift=None) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    drift = np.ones(10) if drift is None else drift
    return [list(10.0 / speedup * d * (1 + noise * rng.standard_normal(10))) for d in drift]


def test_a_1x_result_with_noise_is_not_a_win():
    verdict = faster_beyond_noise(_rounds(1.0, 0.05, 0), _rounds(1.0, 0.05, 1))
    assert not verdict.faster and verdict.low < 1.0 < verdict.high
    assert "not faster beyond the noise" in verdict.reason


def test_a_real_1_3x_win_with_a_few_percent_noise_is_a_win():
    verdict = faster_beyond_noise(_rounds(1.0, 0.04, 0), _rounds(1.3, 0.04, 1))
    assert verdict.faster and 1.2 < verdict.low <= verdict.speedup <= verdict.high < 1.4
    assert verdict.method == "paired rounds"


def test_pairing_the_rounds_sees_a_win_through_drift():
    drift = 1 + 0.3 * np.random.default_rng(7).uniform(-1, 1, 10)  # busy spells slow both alike
    verdict = faster_beyond_noise(_rounds(1.0, 0.01, 0, drift), _rounds(1.1, 0.01, 1, drift))
    assert verdict.faster and verdict.high - verdict.low < 0.05


def test_a_busy_machine_is_said_and_threads_sized_to_the_free_cores(device_report):
    threads = torch.get_num_threads()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(1, (os.cpu_count() or 2) // 2))]  # half the cores
    try:
        time.sleep(0.3)
        report = bench(torch.nn.Linear(8, 4), (EXAMPLE,), ["eager", Wrapped("copy")], device_report, runs=20, load_probe_s=0.5)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    machine = report.conditions["machine"]
    assert machine["other_load_cores"] > 0.5 and machine["other_load_cores_before"] > 0.5
    assert machine["busy"] and machine["reason"].startswith("other processes used")
    assert any(n.startswith("the machine was busy: other processes used") for n in report.notes)
    assert set(machine["round_cv"]) == {"eager", "copy"}
    assert 1 <= report.conditions["threads"] <= threads and torch.get_num_threads() == threads  # restored


def test_one_timed_sample_each_is_said_not_judged():
    """--runs 1 gives one sample a variant: nothing to resample, so no win is claimed (and no crash)."""
    verdict = faster_beyond_noise([[10.0]], [[5.0]])
    assert not verdict.faster and verdict.speedup == 2.0 and math.isnan(verdict.low)
    assert "one timed sample each: not judged against the noise" in verdict.reason


class _PositionTableLargerThanWords(torch.nn.Module):
    """RoBERTa's shape: the position table (18 rows) is larger than the word table (16)."""

    def __init__(self) -> None:
        super().__init__()
        self.words, self.positions = torch.nn.Embedding(16, 4), torch.nn.Embedding(18, 4)

    def forward(self, ids):
        return self.words(ids) + self.positions(torch.arange(ids.shape[1]))


def test_wide_token_ids_stay_within_the_table_the_ids_index():
    """Ids past the word table's end are a CUDA device-side assert, which ends the process: the wide
    set draws across the smallest table that holds every example id, not the largest (positions)."""
    from agnitra.bench.explore import exploring_sets
    from agnitra.workloads.base import TaskKind, Workload

    ids = torch.randint(3, 10, (2, 6), generator=torch.Generator().manual_seed(0))
    model = _PositionTableLargerThanWords().eval()
    wide = dict(exploring_sets(Workload("w", model, (ids,), TaskKind.GENERIC, batch=2)))["wide"][0]
    assert int(wide.max()) >= 10 and int(wide.max()) < 16  # wider than the example, within the words
    model(wide)  # IndexError past the table (on CUDA: the assert)

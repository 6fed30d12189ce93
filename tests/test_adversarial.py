"""The adversarial zoo (agnitra.testing.adversarial): bench and optimize never verify or return a
wrong answer, with every runtime on the CPU (Inductor, ONNX Runtime fp32 and int8, threads)."""

from __future__ import annotations

import pytest

import agnitra
from agnitra.api import describe_device
from agnitra.bench.harness import BenchConfig, Harness
from agnitra.errors import UserError
from agnitra.bench.variants import get_variant
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.testing import ADVERSARIAL, wrong_answer
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.prepare import prepare_workload

RUNTIMES = ("compile", "onnxruntime", "onnxruntime(int8=true)", "threads")
LOSSY_TRUTH = 0.1  # int8: an answer that differs (a frozen branch errs ~1), not one a little less precise


def _bench(case_name: str, seed: int, runtimes=RUNTIMES):
    case = ADVERSARIAL[case_name]
    model, inputs = case.build(seed)
    workload, device = prepare_workload(model, inputs, device="cpu")
    variants = [get_variant("eager")] + [RecipeVariant(Recipe.parse(text)) for text in runtimes]
    config = BenchConfig(variants=variants, runs=3, warmup=1, op_breakdown=False, signature=False, roofline=False, energy=False, load_probe_s=0)
    harness = Harness(workload, device, describe_device(device), config)
    report = harness.run()
    return case, model, inputs, harness, report


# the seed flips the sign of the branch cases' example (each branch is the example's in turn); the
# other cases do not depend on it
SEEDED = [(name, seed) for name in sorted(ADVERSARIAL) for seed in ((0, 1) if name in ("data-dependent-branch", "value-read", "torch-cond") else (0,))]


@pytest.mark.slow
@pytest.mark.parametrize("case_name, seed", SEEDED)
def test_bench_never_verifies_a_wrong_answer(case_name, seed):
    case, model, inputs, harness, report = _bench(case_name, seed)
    verified = [run for run in harness.runs[1:] if run.result.correctness is not None and run.result.correctness.passed]
    if not case.verifiable:
        assert not verified, [run.name for run in verified]
        assert "answers differently on two calls" in (harness.reference_problem or "")
    for run in verified:
        tolerance = LOSSY_TRUTH if run.prepared.lossy else 1e-3
        assert wrong_answer(model, run.prepared.call, case.truth(inputs), tolerance) is None, run.name
    checks = report.conditions["verification"]
    assert checks["behaviour"] and checks["exploring"] and checks["other_shape"]


def test_frozen_runtimes_are_refused_with_the_reason():
    _, _, _, harness, _ = _bench("input-mutation", 0, runtimes=("onnxruntime",))
    onnx = harness.runs[1].result
    assert onnx.status == "skipped" and "changes its inputs in place (input 0)" in onnx.reason
    _, _, _, harness, report = _bench("data-dependent-branch", 0, runtimes=("onnxruntime",))
    assert "froze the value the model reads from its inputs at adversarial.py" in harness.runs[1].result.reason
    assert "bool(tensor) at adversarial.py" in report.conditions["verification"]["behaviour"]


def test_inputs_are_never_changed_for_the_next_call():
    """The model doubles its input in place: fifty timed calls later the original's output is still finite and verified."""
    _, _, inputs, harness, report = _bench("input-mutation", 0, runtimes=("compile",))
    assert harness.reference_problem is None
    assert harness.runs[1].result.correctness.passed, harness.runs[1].result.reason
    assert any("changes its inputs in place" in note for note in report.notes)


@pytest.mark.slow
@pytest.mark.parametrize("case_name", ["data-dependent-branch", "random-in-forward"])
def test_optimize_never_returns_a_wrong_answer(case_name, tmp_path):
    """A model whose answer depends on its input's values gets a verified answer that is right on
    both branches; one that answers differently call to call is refused in one line."""
    case = ADVERSARIAL[case_name]
    model, inputs = case.build(0)
    run = lambda: agnitra.optimize(model, inputs, device="cpu", budget="30s", transforms=["compile", "onnxruntime", "threads"], out=tmp_path / "run")  # noqa: E731
    if not case.verifiable:
        with pytest.raises(UserError, match="answers differently on two calls with the same inputs"):
            run()
        return
    assert wrong_answer(model, run(), case.truth(inputs)) is None

"""The benchmark harness: interleaving, skip/fail records, correctness, decode mode, roofline."""

from __future__ import annotations

import pytest
import torch

from agnitra import api
from agnitra.bench.harness import BenchConfig, benchmark
from agnitra.bench.variants.base import VARIANTS, Prepared, Variant, register_variant
from agnitra.errors import NotApplicable
from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, build_workload

CALL_LOG: list[str] = []


class _Logged(Variant):
    """Eager, but logs each call so the interleaving order can be checked."""

    def __init__(self, name: str, transform=None) -> None:
        self.name, self.transform = name, transform

    def prepare(self, workload, device):
        model, transform, name = workload.model, self.transform, self.name

        def call(*inputs):
            CALL_LOG.append(name)
            out = model(*inputs)
            return transform(out) if transform else out

        return Prepared(call=call)


class _Crashes(Variant):
    name = "test-crashes"

    def prepare(self, workload, device):
        def call(*inputs):
            raise RuntimeError("kernel exploded")

        return Prepared(call=call)


class _NotHere(Variant):
    name = "test-not-here"

    def prepare(self, workload, device):
        raise NotApplicable("needs a machine that does not exist")


for variant in (_Logged("test-a"), _Logged("test-b"), _Logged("test-nan", lambda out: out * float("nan")), _Logged("test-off", lambda out: out * 1.5), _Crashes(), _NotHere()):
    if variant.name not in VARIANTS:
        register_variant(variant)


def _mlp_workload() -> Workload:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16)).eval()
    make = lambda seed: (torch.randn(4, 64, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload(name="mlp", model=model, example_inputs=make(0), task=TaskKind.GENERIC, batch=4, make_inputs=make)


@pytest.fixture(scope="module")
def device_report():
    return api.describe_device(torch.device("cpu"))


def test_variants_are_interleaved_and_records_kept(device_report):
    CALL_LOG.clear()
    config = BenchConfig(variants=["test-a", "test-b", "test-crashes", "test-not-here", "test-nan", "test-off"], runs=20, warmup=1, op_breakdown=False)
    report = benchmark(_mlp_workload(), torch.device("cpu"), device_report, config)
    by = {v.name: v for v in report.variants}
    assert by["test-a"].status == by["test-b"].status == "ok"
    assert by["test-crashes"].status == "failed" and "kernel exploded" in by["test-crashes"].reason
    assert by["test-not-here"].status == "skipped" and by["test-not-here"].reason == "needs a machine that does not exist"
    assert by["test-a"].latency_ms.samples == 20 and by["test-a"].throughput.unit == "items/s"
    # one warm-up each, then four rounds of 5 calls per variant; who goes first rotates per round
    timed = [name for name in CALL_LOG if name in ("test-a", "test-b")]
    assert timed[:22] == ["test-a", "test-b"] + ["test-a"] * 5 + ["test-b"] * 10 + ["test-a"] * 5
    assert [len(r) for r in by["test-b"].round_ms] == [5] * 4  # per-round samples, for the noise verdict
    low, high = by["test-b"].speedup_interval
    assert low <= high and by["test-b"].faster_beyond_noise in (True, False) and by["test-a"].speedup_interval is None
    assert by["test-a"].correctness.details["role"] == "reference"
    assert by["test-b"].correctness.passed and by["test-b"].correctness.value == 0.0
    assert not by["test-nan"].correctness.passed and "NaN" in by["test-nan"].correctness.details["error"]
    assert not by["test-off"].correctness.passed and by["test-off"].correctness.value == pytest.approx(0.5)
    assert by["test-off"].reason == "verification: output: rel_error 0.5 > 0.001"
    assert by["test-off"].correctness.details["sets"] == 3  # held-out sets, not the example inputs
    assert report.roofline and 0 < by["test-a"].roofline_fraction < 1.5
    assert report.conditions["runs"] == 20 and report.conditions["input_sets"] == 4


@pytest.mark.parametrize("runs, rounds", [(30, [5] * 6), (50, [5] * 10), (100, [5] * 20), (12, [3] * 4), (6, [1] * 6)])
def test_calls_a_round_do_not_depend_on_the_runs(device_report, runs, rounds):
    """A search's short screening run and the long final run time the same 5 calls a round (a
    round's first call starts on an idle device), unless the runs are too few for 4 paired rounds."""
    config = BenchConfig(variants=["test-a", "test-b"], runs=runs, warmup=1, op_breakdown=False, check=False, roofline=False, signature=False)
    report = benchmark(_mlp_workload(), torch.device("cpu"), device_report, config)
    assert [len(r) for r in report.variants[1].round_ms] == rounds


def test_report_schema_keys(device_report):
    workload = _mlp_workload()
    report = benchmark(workload, torch.device("cpu"), device_report, BenchConfig(variants=["eager", "test-not-here"], runs=5, warmup=1))
    doc = report.to_dict()
    weights = sum(t.numel() * t.element_size() for t in list(workload.model.parameters()) + list(workload.model.buffers()))
    assert doc["variants"][0]["model_bytes"] == weights > 0  # the variant's own weights, apart from the process peak
    assert doc["schema"] == "agnitra.bench/1"
    assert {"name", "kind", "signature", "ceilings"} <= set(doc["device"])
    assert {"batch", "shapes", "dtype", "runs", "warmup"} <= set(doc["conditions"])
    v = doc["variants"][0]
    for key in ("name", "status", "reason", "latency_ms", "throughput", "peak_memory_bytes", "energy_j_per_item", "roofline_fraction", "correctness"):
        assert key in v
    assert {"median", "p95"} <= set(v["latency_ms"]) and {"value", "unit"} <= set(v["throughput"])
    assert {"metric", "value", "passed"} <= set(v["correctness"])
    assert doc["op_breakdown"] and doc["op_breakdown"][0]["op"].startswith("aten::")
    sig = doc["workload"]["signature"]  # stored with every run, for the search to learn from
    assert sig["version"] == "agnitra.signature/2" and len(sig["values"]) == len(sig["names"]) > 40
    assert any("energy: not measured" in n for n in doc["notes"])  # said, not silently dropped


def test_decode_mode_reports_per_token_latency(device_report):
    workload = build_workload("tinylm", BuildOptions(size="tiny", tokens=6, seq_len=4))
    config = BenchConfig(variants=["eager", "test-not-here"], runs=3, warmup=1)
    report = benchmark(workload, torch.device("cpu"), device_report, config)
    eager = report.variant("eager")
    assert eager.status == "ok"
    assert eager.latency_ms.samples == 3 * 5  # decode steps after the prefilled first token
    assert eager.throughput.unit == "tokens/s"
    # tokens/s is the median over runs of each run's tokens over its steps' time: the median run's mean
    # step lies between the fastest step and 1.5x the mean of all steps (robust to a slow step on a busy CPU)
    assert 1e3 / (1.5 * eager.latency_ms.mean) <= eager.decode.tokens_per_s <= 1e3 / eager.latency_ms.min
    assert eager.decode.prefill_ms > 0
    assert report.conditions["mode"] == "decode" and report.conditions["new_tokens"] == 6
    assert report.roofline.notes.startswith("per one decode step")
    assert any(r.op == "aten::mm" for r in report.op_breakdown)  # the decode step's operators


@pytest.mark.slow
def test_compiled_decode_step_matches_eager(device_report):
    workload = build_workload("tinylm", BuildOptions(size="tiny", tokens=6, seq_len=4))
    report = benchmark(workload, torch.device("cpu"), device_report, BenchConfig(variants=["eager", "compile", "compile-reduce-overhead"], runs=2, warmup=1, op_breakdown=False))
    compiled = report.variant("compile")
    assert compiled.status == "ok", compiled.reason
    c = compiled.correctness
    assert c.metric == "logits" and c.passed and c.details["token_agreement"] == 1.0 and c.value > 60
    assert compiled.setup_s > 0
    assert report.variant("compile-reduce-overhead").status == "skipped"
    assert "CUDA graphs" in report.variant("compile-reduce-overhead").reason


@pytest.mark.slow
def test_onnxruntime_variant_on_a_user_model(device_report):
    from agnitra.bench.variants.recipe import RecipeVariant
    from agnitra.transforms.recipe import Recipe

    as_recipe = RecipeVariant(Recipe.parse("onnxruntime"), name="ort recipe")
    report = benchmark(_mlp_workload(), torch.device("cpu"), device_report,
                       BenchConfig(variants=["eager", "onnxruntime", "onnxruntime-int8", as_recipe], runs=5, warmup=1, op_breakdown=False))
    ort = report.variant("onnxruntime")
    assert ort.status == "ok", ort.reason
    # ONNX Runtime's own weights are not torch's: no weight figure rather than the torch model it keeps
    assert report.variant("eager").model_bytes > 0 and ort.model_bytes is None and report.variant("ort recipe").model_bytes is None
    assert ort.correctness.passed and ort.correctness.value < 1e-5
    int8 = report.variant("onnxruntime-int8")
    assert int8.status == "ok", int8.reason
    assert 1e-5 < int8.correctness.value < 0.3  # quantised: close, not identical (0.15 on a CPU without AVX-512 VNNI, where ORT's int8 kernels differ)


@pytest.mark.slow
def test_onnxruntime_fuses_a_zoo_transformer_and_restores_its_attention(device_report):
    workload = build_workload("bert-base", BuildOptions(size="tiny", batch=2))
    report = benchmark(workload, torch.device("cpu"), device_report, BenchConfig(variants=["eager", "onnxruntime"], runs=3, warmup=1, op_breakdown=False))
    ort = report.variant("onnxruntime")
    assert ort.status == "ok", ort.reason
    assert ort.correctness.passed
    note = next(n for n in report.notes if n.startswith("onnxruntime:"))
    assert "torchscript export" in note and "Attention" in note  # ORT's optimizer fused attention
    assert workload.model.bert.config._attn_implementation == "sdpa"


def test_decoders_verify_the_requested_positions_in_windows(device_report):
    from agnitra.transforms import Recipe
    from agnitra.bench.variants.recipe import RecipeVariant
    from agnitra.verify import Tolerances

    workload = build_workload("tinylm", BuildOptions(size="tiny", tokens=6, seq_len=4))
    config = BenchConfig(variants=["eager", RecipeVariant(Recipe.of("int8-weight-only"))], runs=1, warmup=0, op_breakdown=False, tolerances=Tolerances(check_positions=15))
    report = benchmark(workload, torch.device("cpu"), device_report, config)
    int8 = report.variants[1]
    assert int8.status == "ok", int8.reason
    assert int8.correctness.details["positions"] == 18  # three windows of 6 (the timed cache holds 4 + 6)
    assert report.conditions["correctness"] == "teacher-forced logits over 18 positions (3 prompts x 6) x batch 1"


def test_a_decoder_sqnr_bar_set_by_the_user_decides(device_report):
    from agnitra.transforms import Recipe
    from agnitra.bench.variants.recipe import RecipeVariant
    from agnitra.verify import Tolerances

    workload = build_workload("tinylm", BuildOptions(size="tiny", tokens=6, seq_len=4))
    verdicts = {}
    for bar in (5.0, 90.0):
        config = BenchConfig(variants=["eager", RecipeVariant(Recipe.of("int8-weight-only"))], runs=1, warmup=0, op_breakdown=False, tolerances=Tolerances(min_sqnr_db=bar))
        int8 = benchmark(workload, torch.device("cpu"), device_report, config).variants[1]
        assert int8.status == "ok", int8.reason
        assert int8.correctness.threshold == bar and 5.0 < int8.correctness.value < 90.0
        verdicts[bar] = int8.correctness.passed
    assert verdicts == {5.0: True, 90.0: False}

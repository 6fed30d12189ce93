"""Report writers: report.json, metrics.csv, the self-contained report.html and the Rich tables."""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path

import plotly.offline
import pytest
from rich.console import Console

from pages import assert_self_contained

from agnitra.report.console import bench_table, decode_summary, ops_table
from agnitra.report.files import BENCH_CSV_COLUMNS, write_bench_report, write_profile_report
from agnitra.report.html import (
    bench_html,
    latency_figure,
    ops_share_figure,
    profile_html,
    throughput_figure,
)
from agnitra.results import (
    PROFILE_SCHEMA,
    SCHEMA,
    BenchReport,
    Correctness,
    DecodeStats,
    DeviceReport,
    Latency,
    OpRow,
    ProfileReport,
    Roofline,
    Throughput,
    VariantResult,
)
from agnitra.report.units import format_bytes, format_flops, format_percent, format_time_us

XSS = "<script>alert(1)</script>"
SKIP_REASON = "onnxruntime is not installed; pip install 'onnxruntime>=1.20' & retry"
PLOTLY_HEAD = plotly.offline.get_plotlyjs()[:400]


def make_device() -> DeviceReport:
    return DeviceReport(
        name="Intel Xeon (2 cores)",
        kind="cpu",
        signature={"cpu": "Intel Xeon", "threads": 2, "torch": "2.13.0"},
        ceilings={"copy_gbps": 18.4, "matmul_tflops": {"float32": 0.121, "bfloat16": 0.05}, "cached": True},
    )


def make_ops() -> list[OpRow]:
    return [
        OpRow("aten::mm", 48, 5200.0, 0.62, "1x128x384, 384x1536", 3.6e9, 2.4e7, 150.0, "0.69 TFLOP/s"),
        OpRow("aten::softmax", 12, 1300.0, 0.155, "1x12x128x128", 0.0, 3.1e6, None),
        OpRow("aten::layer_norm", 25, 900.0, 0.107, "1x128x384", 1.2e6, 9.8e6, 0.12),
    ]


def make_bench_report(model_name: str = "zoo:minilm", eager_name: str = "eager") -> BenchReport:
    eager = VariantResult(
        name=eager_name,
        status="ok",
        latency_ms=Latency(median=12.345, p95=13.9, min=11.8, mean=12.5, samples=50),
        throughput=Throughput(81.0, "sequences/s"),
        peak_memory_bytes=734_003_200,  # 700 MiB
        energy_j_per_item=0.0421,
        roofline_fraction=0.183,
        correctness=Correctness("rel_error", 0.0, True, threshold=1e-3),
        setup_s=0.4,
    )
    compiled = VariantResult(
        name="compile-max-autotune",
        status="ok",
        latency_ms=Latency(median=6.2, p95=6.8, min=6.0, mean=6.3, samples=50),
        throughput=Throughput(161.3, "sequences/s"),
        peak_memory_bytes=524_288_000,  # 500 MiB
        energy_j_per_item=float("nan"),  # meter gave nothing usable
        roofline_fraction=0.364,
        correctness=Correctness("rel_error", 2.5e-6, True, threshold=1e-3),
        setup_s=41.7,
        decode=DecodeStats(
            tokens_per_s=320.5,
            per_token_ms=Latency(median=3.12, p95=3.4, min=3.0, mean=3.15, samples=64),
            prefill_ms=18.75,
            new_tokens=64,
            prompt_len=128,
            batch=1,
        ),
    )
    skipped = VariantResult(name="onnxruntime", status="skipped", reason=SKIP_REASON)
    return BenchReport(
        workload={"name": model_name, "task": "encoder", "batch": 1, "seq_len": 128},
        device=make_device(),
        conditions={"runs": 50, "warmup": 10, "threads": 2, "dtype": "float32"},
        variants=[eager, compiled, skipped],
        roofline=Roofline(flops=3.7e9, bytes=9.1e7, floor_ms=1.13, bound="compute", dtype="float32"),
        op_breakdown=make_ops(),
        created_at="2025-11-21T16:30:00Z",
        versions={"agnitra": "0.1.0", "torch": "2.13.0", "plotly": "7.1.0"},
        notes=["CPU frequency scaling was not pinned."],
    )


def make_profile_report(nvml: dict | None = None) -> ProfileReport:
    return ProfileReport(
        workload={"name": "zoo:minilm"},
        device=make_device(),
        conditions={"runs": 20, "profiled_runs": 5},
        latency_ms=Latency(median=12.1, p95=13.0, min=11.9, mean=12.2, samples=20),
        ops=make_ops(),
        total_flops=3.7e9,
        total_bytes=9.1e7,
        peak_memory_bytes=734_003_200,
        nvml=nvml,
        nvml_reason="" if nvml else "no NVIDIA GPU on this machine",
        created_at="2025-11-21T16:31:00Z",
        versions={"agnitra": "0.1.0", "torch": "2.13.0"},
    )


def render(renderable) -> str:
    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


# ---------------------------------------------------------------- files


def test_bench_writes_three_files_in_new_nested_dir(tmp_path: Path):
    out = tmp_path / "runs" / "demo"
    paths = write_bench_report(make_bench_report(), out)
    assert set(paths) == {"json", "csv", "html"}
    assert paths["json"] == out / "report.json"
    assert paths["csv"] == out / "metrics.csv"
    assert paths["html"] == out / "report.html"
    for path in paths.values():
        assert path.is_file() and path.stat().st_size > 0


def test_bench_json_has_the_documented_keys(tmp_path: Path):
    paths = write_bench_report(make_bench_report(), tmp_path)
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert data["schema"] == SCHEMA
    assert data["workload"]["name"] == "zoo:minilm"
    assert set(data["device"]) >= {"name", "kind", "signature", "ceilings"}
    assert data["device"]["ceilings"]["matmul_tflops"]["float32"] == 0.121
    assert data["conditions"]["runs"] == 50
    assert [v["name"] for v in data["variants"]] == ["eager", "compile-max-autotune", "onnxruntime"]
    for variant in data["variants"]:
        assert set(variant) >= {"name", "status", "reason", "latency_ms", "throughput", "peak_memory_bytes",
                                "energy_j_per_item", "roofline_fraction", "correctness"}
    eager = data["variants"][0]
    assert eager["latency_ms"]["median"] == 12.345 and eager["latency_ms"]["p95"] == 13.9
    assert eager["throughput"] == {"value": 81.0, "unit": "sequences/s"}
    assert eager["peak_memory_bytes"] == 734_003_200
    assert eager["energy_j_per_item"] == 0.0421
    assert eager["roofline_fraction"] == 0.183
    assert set(eager["correctness"]) >= {"metric", "value", "passed"}
    assert eager["correctness"]["metric"] == "rel_error" and eager["correctness"]["passed"] is True
    compiled = data["variants"][1]
    assert compiled["decode"]["tokens_per_s"] == 320.5
    assert compiled["decode"]["per_token_ms"]["p95"] == 3.4
    skipped = data["variants"][2]
    assert skipped["status"] == "skipped" and skipped["reason"] == SKIP_REASON
    assert skipped["latency_ms"] is None and skipped["correctness"] is None
    assert data["roofline"]["bound"] == "compute"
    assert [row["op"] for row in data["op_breakdown"]] == ["aten::mm", "aten::softmax", "aten::layer_norm"]


def test_nan_becomes_null_in_json_and_empty_in_csv(tmp_path: Path):
    paths = write_bench_report(make_bench_report(), tmp_path)
    text = paths["json"].read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["variants"][1]["energy_j_per_item"] is None
    rows = list(csv.DictReader(paths["csv"].open(newline="", encoding="utf-8")))
    assert rows[1]["energy_j_per_item"] == ""
    assert "nan" not in paths["csv"].read_text(encoding="utf-8").lower()


def test_bench_csv_has_one_row_per_variant_with_flat_values(tmp_path: Path):
    paths = write_bench_report(make_bench_report(), tmp_path)
    with paths["csv"].open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == BENCH_CSV_COLUMNS
        rows = list(reader)
    assert [row["variant"] for row in rows] == ["eager", "compile-max-autotune", "onnxruntime"]
    eager, compiled, skipped = rows
    assert eager["status"] == "ok" and eager["reason"] == ""
    assert float(eager["latency_median_ms"]) == 12.345
    assert float(eager["latency_p95_ms"]) == 13.9
    assert float(eager["throughput"]) == 81.0 and eager["throughput_unit"] == "sequences/s"
    assert int(eager["peak_memory_bytes"]) == 734_003_200
    assert float(eager["energy_j_per_item"]) == 0.0421
    assert float(eager["roofline_fraction"]) == 0.183
    assert eager["correctness_metric"] == "rel_error"
    assert float(eager["correctness_value"]) == 0.0
    assert eager["correctness_passed"] == "true"
    assert float(eager["setup_s"]) == 0.4
    assert eager["tokens_per_s"] == "" and eager["per_token_median_ms"] == ""
    assert float(compiled["tokens_per_s"]) == 320.5
    assert float(compiled["per_token_median_ms"]) == 3.12
    assert float(compiled["per_token_p95_ms"]) == 3.4
    assert float(compiled["correctness_value"]) == 2.5e-6
    assert skipped["status"] == "skipped" and skipped["reason"] == SKIP_REASON
    assert skipped["latency_median_ms"] == "" and skipped["correctness_passed"] == ""


def test_profile_writes_json_csv_html(tmp_path: Path):
    paths = write_profile_report(make_profile_report(), tmp_path / "profile")
    assert set(paths) == {"json", "csv", "html"}
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert data["schema"] == PROFILE_SCHEMA
    assert data["nvml"] is None and data["nvml_reason"] == "no NVIDIA GPU on this machine"
    assert data["ops"][0]["op"] == "aten::mm" and data["ops"][1]["intensity"] is None
    with paths["csv"].open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == ["op", "calls", "self_time_us", "share", "input_shapes", "flops", "bytes",
                                     "intensity", "achieved"]
        rows = list(reader)
    assert [row["op"] for row in rows] == ["aten::mm", "aten::softmax", "aten::layer_norm"]
    assert int(rows[0]["calls"]) == 48 and float(rows[0]["self_time_us"]) == 5200.0
    assert rows[0]["input_shapes"] == "1x128x384, 384x1536"
    assert rows[1]["intensity"] == ""
    page = paths["html"].read_text(encoding="utf-8")
    assert "no NVIDIA GPU on this machine" in page
    assert "aten::layer_norm" in page


# ---------------------------------------------------------------- html


def test_bench_html_is_self_contained_with_plotly_inlined_once():
    page = bench_html(make_bench_report())
    assert_self_contained(page)
    assert page.count(PLOTLY_HEAD) == 1
    outside_library = page.replace(plotly.offline.get_plotlyjs(), "")
    assert "http://" not in outside_library and "https://" not in outside_library
    assert page.count("Plotly.newPlot(") >= 3  # latency, throughput, operator share


def test_bench_html_shows_variants_reasons_roofline_and_ops():
    report = make_bench_report()
    page = bench_html(report)
    for variant in report.variants:
        assert html.escape(variant.name) in page
    assert html.escape(SKIP_REASON) in page
    assert "rel_error=2.50e-06 ✓" in page
    assert "700.0" in page  # peak memory in MiB
    assert "18.3%" in page  # roofline fraction
    assert "3.70 GFLOP" in page and "1.13 ms" in page  # roofline flops and floor
    assert "aten::softmax" in page and "1x12x128x128" in page
    assert "320.5" in page  # decode tokens/s
    assert "CPU frequency scaling was not pinned." in page
    assert "2025-11-21T16:30:00Z" in page and "2.13.0" in page and "Intel Xeon (2 cores)" in page


def test_bench_html_flattens_ceilings_and_shows_gpu_columns_only_when_measured():
    report = make_bench_report()
    assert "Power W" not in bench_html(report)
    report.variants[1].power_w, report.variants[1].utilization = 212.5, 87.0  # NVML: percent
    page = bench_html(report)
    assert "matmul_tflops.float32" in page and "0.121" in page
    assert "Power W" in page and "212.5" in page and "87.0%" in page


def test_bench_html_escapes_user_text():
    page = bench_html(make_bench_report(model_name=XSS, eager_name=XSS))
    assert XSS not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert_self_contained(page)


def test_chart_labels_show_user_text_literally():
    report = make_bench_report(eager_name=XSS)
    report.op_breakdown[0].op = "<b>fused</b>"
    assert latency_figure(report.variants)["data"][0]["x"][0] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert throughput_figure(report.variants)["data"][0]["x"][0] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert ops_share_figure(report.op_breakdown)["data"][0]["y"][-1] == "&lt;b&gt;fused&lt;/b&gt;"


def test_ops_share_figure_keeps_repeated_ops_apart_and_caps_at_top():
    rows = [OpRow("aten::mm", 1, 10.0 - i, (10.0 - i) / 100, f"{i}x8", 0.0, 0.0, None) for i in range(20)]
    labels = list(ops_share_figure(rows)["data"][0]["y"])
    assert len(labels) == 15 and len(set(labels)) == 15


def test_bench_html_without_successful_variants_has_no_charts():
    report = make_bench_report()
    report.variants = [VariantResult("onnxruntime", "skipped", reason=SKIP_REASON),
                       VariantResult("compile", "failed", reason="RuntimeError: boom")]
    report.op_breakdown = []
    page = bench_html(report)
    assert PLOTLY_HEAD not in page and "Plotly.newPlot(" not in page
    assert "RuntimeError: boom" in page
    assert_self_contained(page)


def test_profile_html_is_self_contained_and_complete():
    page = profile_html(make_profile_report(nvml={"utilization": 0.87, "power_w": 212.5, "energy_j": 3.1}))
    assert_self_contained(page)
    assert page.count(PLOTLY_HEAD) == 1
    for op in ("aten::mm", "aten::softmax", "aten::layer_norm"):
        assert op in page
    assert "212.5" in page and "no NVIDIA GPU" not in page
    assert "12.1 ms" in page and "700 MiB" in page


def test_profile_html_escapes_workload_name():
    report = make_profile_report()
    report.workload = {"name": XSS}
    report.ops[0].op = XSS
    page = profile_html(report)
    assert XSS not in page
    assert "&lt;script&gt;" in page


# ---------------------------------------------------------------- console


def test_bench_table_renders_values():
    text = render(bench_table(make_bench_report()))
    for expected in ("eager", "compile-max-autotune", "onnxruntime", "skipped", "12.35", "13.90", "6.200",
                     "81.00 sequences/s", "700.0", "18.3%", "42.1 mJ", "rel_error=0 ✓",
                     "rel_error=2.50e-06 ✓", "onnxruntime is not installed"):
        assert expected in text, expected


def test_bench_table_marks_failed_correctness():
    report = make_bench_report()
    report.variants[1].correctness = Correctness("cosine", 0.91, False, threshold=0.99)
    assert "cosine=0.910 ✗" in render(bench_table(report))


def test_ops_table_limits_and_truncates():
    rows = make_ops()
    rows[2].input_shapes = ", ".join(["1x128x384"] * 20)
    text = render(ops_table(rows, limit=2, title="Top ops"))
    assert "Top ops" in text
    assert "aten::mm" in text and "aten::softmax" in text
    assert "aten::layer_norm" not in text.split("more operator")[0]
    assert "1 more operator rows not shown (10.7% of self time)" in text
    full = render(ops_table(rows))
    assert "aten::layer_norm" in full and "…" in full
    assert "5.20 ms" in full and "62.0%" in full and "3.60 GFLOP" in full and "150 FLOP/B" in full


def test_decode_summary_only_for_decoders():
    report = make_bench_report()
    summary = decode_summary(report)
    assert summary is not None
    assert "compile-max-autotune" in summary and "320.5 tokens/s" in summary
    assert "3.12 ms median" in summary and "3.40 ms p95" in summary and "18.8 ms" in summary
    assert "eager" not in summary
    report.variants[1].decode = None
    assert decode_summary(report) is None


# ---------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("formatted", "expected"),
    [
        (format_bytes(1536), "1.50 KiB"),
        (format_bytes(734_003_200), "700 MiB"),
        (format_bytes(512), "512 B"),
        (format_bytes(None), "—"),
        (format_flops(2.5e9), "2.50 GFLOP"),
        (format_flops(float("nan")), "—"),
        (format_time_us(12.3), "12.3 µs"),
        (format_time_us(1500.0), "1.50 ms"),
        (format_time_us(2.5e6), "2.50 s"),
        (format_time_us(0.25), "250 ns"),
        (format_percent(0.4567), "45.7%"),
    ],
)
def test_units(formatted: str, expected: str):
    assert formatted == expected


def test_units_never_show_nan():
    formatters = (format_bytes, format_flops, format_time_us, format_percent)
    assert all(f(math.nan) == "—" and f(math.inf) == "—" for f in formatters)

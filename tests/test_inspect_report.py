"""The `inspect` report: inspect.json, ir.json, the self-contained inspect.html and the Rich tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import plotly.offline
from rich.console import Console

import pages

from agnitra.ir.graph import IR_SCHEMA, GraphBreak, GraphIR, IRNode
from agnitra.ir.hotspots import Hotspot, module_hotspots
from agnitra.report.inspect_console import graph_breaks_table, hotspot_table, op_mix_table
from agnitra.report.inspect_files import write_inspect_report
from agnitra.report.inspect_html import hotspot_figure, inspect_html, op_mix_figure
from agnitra.results import INSPECT_SCHEMA, DeviceReport, InspectReport
from agnitra.report.units import format_flops, format_percent, format_time_us

XSS = "<script>alert(1)</script>"
ESCAPED_XSS = "&lt;script&gt;alert(1)&lt;/script&gt;"
BREAK_REASON = "call to builtin print() & data-dependent branch <unsupported>"
BREAK_LOCATION = "model.py:42"
SIGNATURE_NAMES = ["matmul_flops_share", "attention_time_share", "log2_params", "seq_len"]
SIGNATURE_VALUES = [0.8712, 0.4130, 17.25, 128]
PLOTLY_JS = plotly.offline.get_plotlyjs()
PLOTLY_HEAD = PLOTLY_JS[:400]

TOKENS, HIDDEN, FFN = 128, 384, 1536
LINEAR_QKV = 2 * TOKENS * HIDDEN * HIDDEN  # 37.7 MFLOP
LINEAR_FC = 2 * TOKENS * HIDDEN * FFN  # 151 MFLOP
ACT = TOKENS * HIDDEN * 4  # bytes of one float32 activation
TOTAL_US = 230.0


def make_node(name: str, op: str, kind: str, module: str, module_type: str, time_us: float | None,
              flops: float = 0.0, inputs: list[str] | None = None, in_shapes=None, out_shape=None,
              weight: bool = False, read: float = ACT, written: float = ACT) -> IRNode:
    return IRNode(
        name=name, op=op, kind=kind, module=module, module_type=module_type,
        inputs=inputs or [], input_shapes=in_shapes or [[1, TOKENS, HIDDEN]],
        input_dtypes=["float32"] * len(in_shapes or [[1]]),
        output_shapes=[out_shape or [1, TOKENS, HIDDEN]], output_dtypes=["float32"],
        weight_input=weight, flops=flops, bytes_read=read, bytes_written=written,
        bound="compute" if flops > 1e7 else "memory",
        time_us=time_us, share=time_us / TOTAL_US if time_us is not None else None,
    )


def make_ir(mlp: str = "layers.0.mlp", breaks: bool = True) -> GraphIR:
    """Eight nodes over three modules: the MLP takes 130 of 230 µs, attention 95, the embedding 5."""
    attn = "layers.0.attn"
    weight = [HIDDEN, HIDDEN]
    nodes = [
        make_node("embedding", "aten::embedding", "embedding", "embed", "Embedding", 5.0,
                  inputs=["input_ids", "embed.weight"], in_shapes=[[1, TOKENS], [30522, HIDDEN]], weight=True),
        make_node("linear", "aten::linear", "matmul", attn, "SelfAttention", 30.0, LINEAR_QKV,
                  inputs=["embedding", "q.weight"], in_shapes=[[1, TOKENS, HIDDEN], weight], weight=True),
        make_node("sdpa", "aten::scaled_dot_product_attention", "attention", attn, "SelfAttention", 40.0,
                  2 * 2 * TOKENS * TOKENS * HIDDEN, inputs=["linear"]),
        make_node("linear_1", "aten::linear", "matmul", attn, "SelfAttention", 25.0, LINEAR_QKV,
                  inputs=["sdpa", "o.weight"], in_shapes=[[1, TOKENS, HIDDEN], weight], weight=True),
        make_node("linear_2", "aten::linear", "matmul", mlp, "MLP", 60.0, LINEAR_FC,
                  inputs=["linear_1", "fc1.weight"], in_shapes=[[1, TOKENS, HIDDEN], [FFN, HIDDEN]],
                  out_shape=[1, TOKENS, FFN], weight=True),
        make_node("gelu", "aten::gelu", "elementwise", mlp, "MLP", 10.0, 8.0 * TOKENS * FFN,
                  inputs=["linear_2"], in_shapes=[[1, TOKENS, FFN]], out_shape=[1, TOKENS, FFN]),
        make_node("linear_3", "aten::linear", "matmul", mlp, "MLP", 55.0, LINEAR_FC,
                  inputs=["gelu", "fc2.weight"], in_shapes=[[1, TOKENS, FFN], [HIDDEN, FFN]], weight=True),
        make_node("add", "aten::add", "elementwise", mlp, "MLP", 5.0, TOKENS * HIDDEN,
                  inputs=["linear_3", "linear_1"]),
    ]
    return GraphIR(
        name="tiny-encoder", source="export", nodes=nodes,
        inputs=[{"name": "input_ids", "shape": [1, TOKENS], "dtype": "int64"}],
        params=12_345_678, param_bytes=49_382_712,
        graph_breaks=[GraphBreak(BREAK_REASON, BREAK_LOCATION)] if breaks else [],
        notes=["Times are per node, from the profiler's device self time."],
        timing={"method": "torch.profiler", "runs": 20},
        device="cpu",
    )


def make_report(mlp: str = "layers.0.mlp", breaks: bool = True, timing: dict | None = None) -> InspectReport:
    ir = make_ir(mlp, breaks)
    return InspectReport(
        workload={"name": "zoo:tiny-encoder", "batch": 1, "seq_len": TOKENS},
        device=DeviceReport(name="Intel Xeon (2 cores)", kind="cpu", signature={"threads": 2},
                            ceilings={"copy_gbps": 18.4}),
        ir=ir,
        hotspots=module_hotspots(ir),
        signature={"version": "agnitra.signature/1", "names": SIGNATURE_NAMES, "values": SIGNATURE_VALUES},
        timing=timing if timing is not None else {"total_us": 250.0, "attributed_share": 0.92},
        created_at="2025-11-22T09:15:00Z",
        versions={"agnitra": "0.1.0", "torch": "2.13.0"},
    )


def assert_self_contained(page: str) -> None:
    pages.assert_self_contained(page)
    assert page.count(PLOTLY_HEAD) == 1
    outside_library = page.replace(PLOTLY_JS, "")
    assert "http://" not in outside_library and "https://" not in outside_library


def render(renderable) -> str:
    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


# ---------------------------------------------------------------- the fixture itself


def test_fixture_hotspots_are_the_three_modules_by_time():
    spots = make_report().hotspots
    assert [s.module for s in spots] == ["layers.0.mlp", "layers.0.attn", "embed"]
    assert math.isclose(spots[0].share, 130 / 230) and spots[0].kind == "matmul"


# ---------------------------------------------------------------- files


def test_writes_three_files_in_new_nested_dir(tmp_path: Path):
    out = tmp_path / "runs" / "inspect"
    paths = write_inspect_report(make_report(), out)
    assert paths == {"json": out / "inspect.json", "ir": out / "ir.json", "html": out / "inspect.html"}
    for path in paths.values():
        assert path.is_file() and path.stat().st_size > 0


def test_inspect_json_round_trips_with_schema_hotspots_and_signature(tmp_path: Path):
    report = make_report()
    data = json.loads(write_inspect_report(report, tmp_path)["json"].read_text(encoding="utf-8"))
    assert data == json.loads(json.dumps(report.to_dict()))
    assert data["schema"] == INSPECT_SCHEMA == "agnitra.inspect/1"
    assert data["ir"]["schema"] == IR_SCHEMA == "agnitra.ir/1"
    assert data["ir"]["totals"]["nodes"] == 8
    assert [h["module"] for h in data["hotspots"]] == ["layers.0.mlp", "layers.0.attn", "embed"]
    assert set(data["hotspots"][0]) >= {"module", "module_type", "kind", "time_us", "share", "flops", "bytes",
                                        "intensity", "bound", "nodes"}
    assert [Hotspot(**h) for h in data["hotspots"]] == report.hotspots
    assert data["signature"] == {"version": "agnitra.signature/1", "names": SIGNATURE_NAMES,
                                 "values": SIGNATURE_VALUES}
    assert data["timing"] == {"total_us": 250.0, "attributed_share": 0.92}
    assert data["device"]["name"] == "Intel Xeon (2 cores)"


def test_ir_json_parses_back_to_an_equal_graph(tmp_path: Path):
    report = make_report()
    data = json.loads(write_inspect_report(report, tmp_path)["ir"].read_text(encoding="utf-8"))
    assert data["schema"] == IR_SCHEMA
    assert "hotspots" not in data and "signature" not in data  # the IR alone
    parsed = GraphIR.from_dict(data)
    assert parsed.nodes == report.ir.nodes
    assert parsed.graph_breaks == [GraphBreak(BREAK_REASON, BREAK_LOCATION)]
    assert parsed.inputs == report.ir.inputs and parsed.params == report.ir.params


def test_nan_in_the_ir_becomes_null_in_both_json_files(tmp_path: Path):
    report = make_report()
    report.ir.nodes[0].share = float("nan")
    paths = write_inspect_report(report, tmp_path)
    for name in ("json", "ir"):
        text = paths[name].read_text(encoding="utf-8")
        assert "NaN" not in text and "Infinity" not in text
    assert json.loads(paths["ir"].read_text(encoding="utf-8"))["nodes"][0]["share"] is None


# ---------------------------------------------------------------- html


def test_html_is_self_contained_with_plotly_inlined_once():
    page = inspect_html(make_report())
    assert page.startswith("<!DOCTYPE html>")
    assert_self_contained(page)
    assert page.count("Plotly.newPlot(") == 2  # operator mix, hotspots


def test_html_header_shows_source_totals_and_measured_time():
    page = inspect_html(make_report())
    assert "Inspect: zoo:tiny-encoder" in page
    assert "Intel Xeon (2 cores)" in page and "2025-11-22T09:15:00Z" in page
    assert "export IR" in page and "8 nodes" in page
    assert "12.3 M (47.1 MiB)" in page  # parameters
    ir = make_ir()
    assert format_flops(ir.total_flops) in page
    assert "250 µs measured, 92.0% in named modules" in page  # report.timing wins over node sums


def test_html_falls_back_to_node_times_without_report_timing():
    page = inspect_html(make_report(timing={}))
    assert f"{format_time_us(TOTAL_US)} measured, 100.0% in named modules" in page


def test_html_shows_modules_breaks_notes_signature_and_nodes():
    page = inspect_html(make_report())
    for module in ("layers.0.mlp", "layers.0.attn", "embed"):
        assert module in page
    assert "SelfAttention" in page
    assert "2 of 3 modules cover 80% of the time" in page
    assert format_percent(130 / 230) in page
    assert "call to builtin print() &amp; data-dependent branch &lt;unsupported&gt;" in page
    assert BREAK_LOCATION in page
    assert "Times are per node, from the profiler&#x27;s device self time." in page
    assert "agnitra.signature/1" in page
    for name in SIGNATURE_NAMES:
        assert name in page
    assert "0.8712" in page and "17.25" in page
    assert "aten::scaled_dot_product_attention" in page
    assert "1x128x1536, 384x1536" in page  # input shapes of the second MLP linear
    assert format_flops(LINEAR_FC) in page


def test_html_top_nodes_are_ordered_by_time():
    page = inspect_html(make_report())
    table = page[page.index("<h2>Top nodes</h2>"):]
    positions = [table.index(f"<td>{name}</td>") for name in ("linear_2", "linear_3", "sdpa", "embedding")]
    assert positions == sorted(positions)


def test_html_says_when_there_are_no_graph_breaks():
    page = inspect_html(make_report(breaks=False))
    assert "No graph breaks" in page
    assert BREAK_LOCATION not in page


def test_html_escapes_module_names_everywhere():
    page = inspect_html(make_report(mlp=XSS))
    assert XSS not in page
    assert ESCAPED_XSS in page
    assert_self_contained(page)


def test_chart_labels_show_module_names_literally():
    report = make_report(mlp=XSS)
    labels = list(hotspot_figure(report.hotspots)["data"][0]["y"])
    assert labels[-1] == f"{ESCAPED_XSS} (matmul)"  # largest on top, i.e. last
    assert labels[0] == "embed (embedding)"


def test_hotspot_figure_caps_at_twenty_modules():
    spots = [Hotspot(f"blocks.{i}", "Block", "matmul", 100.0 - i, (100.0 - i) / 4000, 1e6, 1e5, 10.0,
                     "compute", 3) for i in range(30)]
    assert len(hotspot_figure(spots)["data"][0]["y"]) == 20


def test_op_mix_figure_puts_flops_and_time_side_by_side():
    figure = op_mix_figure(make_ir())
    flops, time = figure["data"]
    assert [flops["name"], time["name"]] == ["share of FLOPs", "share of time"]
    assert flops["x"] == ["matmul", "attention", "embedding", "elementwise"]  # KINDS order
    time_share = dict(zip(time["x"], time["y"]))
    assert math.isclose(time_share["matmul"], 170 / 230 * 100)
    assert flops["customdata"] == [4, 1, 1, 2]  # node counts for the hover


# ---------------------------------------------------------------- console


def test_hotspot_table_renders_values_and_the_80_percent_caption():
    text = render(hotspot_table(make_report().hotspots))
    for value in ("layers.0.mlp", "MLP", "matmul", "56.5%", "130 µs", "layers.0.attn", "41.3%", "embed",
                  "2.2%", "compute"):
        assert value in text
    assert "2 of 3 modules cover 80% of the time" in text


def test_hotspot_table_limits_rows_and_keeps_names_literal():
    spots = [Hotspot(f"blocks[{i}]", "Block", "matmul", 100.0 - i, (100.0 - i) / 4000, 1e6, 1e5, 10.0,
                     "compute", 3) for i in range(30)]
    spots[0].module = "[bold]fused[/bold]"  # Rich markup in a name is shown, not applied
    text = render(hotspot_table(spots, limit=5))
    assert "[bold]fused[/bold]" in text
    assert "blocks[4]" in text and "blocks[5]" not in text
    assert "25 more modules not shown" in text


def test_op_mix_table_shows_counts_and_shares():
    ir = make_ir()
    text = render(op_mix_table(ir))
    assert "time share" in text
    assert "matmul" in text and format_percent(170 / 230) in text
    assert format_percent(ir.op_mix()["matmul"]["flops_share"]) in text
    for node in ir.nodes:
        node.time_us = None
    assert "time share" not in render(op_mix_table(ir))


def test_graph_breaks_table_only_when_there_are_breaks():
    assert graph_breaks_table(make_ir(breaks=False)) is None
    text = render(graph_breaks_table(make_ir()))
    assert BREAK_REASON in text and BREAK_LOCATION in text

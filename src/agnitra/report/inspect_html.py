"""The self-contained HTML page of `agnitra inspect`.

Built from the pieces of `agnitra.report.html` (tables, sections, chart embedding, page frame),
so it shares their guarantees: no network (plotly.js inlined once, only when there is a chart),
inline CSS, and every piece of report text (module names, op names, graph-break reasons, notes)
escaped, in tables with `html.escape` and in chart labels and hovers for plotly's HTML subset.

The measured total and the share of it attributed to named modules come from `report.timing`
(`total_us` or `total_ms`, `attributed_share`); where those keys are absent they are derived from
the IR's node times.
"""

from __future__ import annotations

import html
import math
from typing import Any, Sequence


from agnitra.ir.graph import GraphBreak, GraphIR, IRNode
from agnitra.ir.hotspots import Hotspot
from agnitra.report import charts
from agnitra.report.html import (
    _base_layout,
    _chart_label,
    _Charts,
    _context_section,
    _header,
    _kv_table,
    _notes_list,
    _page,
    _section,
    _table,
    _unique_labels,
    _workload_name,
)
from agnitra.report.inspect_console import cover_caption, is_timed, module_label, op_mix_with_time
from agnitra.results import InspectReport
from agnitra.report.units import (
    MISSING,
    format_bytes,
    format_flops,
    format_intensity,
    format_percent,
    format_si,
    format_time_us,
    is_number,
    truncate,
)

TOP_HOTSPOTS_CHARTED = 20
TOP_NODES_LISTED = 50
SIGNATURE_COLUMNS = 3
SHAPES_WIDTH = 160
LABEL_WIDTH = 60


def inspect_html(report: InspectReport) -> str:
    """The `inspect` report as one self-contained HTML page."""
    charts = _Charts()
    ir: GraphIR = report.ir
    body = "".join([
        _header("Inspect", report.workload, report.device, report.created_at),
        _headline(report),
        _summary_section(report),
        _section("Operator mix", charts.embed(op_mix_figure(ir)), _op_mix_table(ir)),
        _section("Hotspots", charts.embed(hotspot_figure(report.hotspots)),
                 _hotspot_table(report.hotspots)),
        _section("Graph breaks", _graph_breaks_html(ir.graph_breaks)),
        _section("Notes", _notes_list(ir.notes)),
        _section("Workload signature", _signature_html(report.signature)),
        _section("Top nodes", _nodes_table(ir, measured_total_us(report))),
        _context_section(report.workload, report.device, {}, report.versions),
        f'<p class="muted">Schema {html.escape(report.schema)}, IR schema {html.escape(ir.schema)}</p>',
    ])
    title = f"Agnitra inspect: {_workload_name(report.workload)}"
    return _page(title, body, with_plotly=charts.count > 0)


# ---------------------------------------------------------------- timing


def measured_total_us(report: InspectReport) -> float | None:
    """The measured time of one call, in µs: report.timing's total, else the sum of node times."""
    timing = report.timing
    if is_number(timing.get("total_us")):
        return float(timing["total_us"])
    if is_number(timing.get("total_ms")):
        return float(timing["total_ms"]) * 1e3
    times = [node.time_us for node in report.ir.nodes if is_number(node.time_us)]
    return sum(times) if times else None


def attributed_share(report: InspectReport) -> float | None:
    """The share of the measured total owned by named modules (not the root), if known."""
    if is_number(report.timing.get("attributed_share")):
        return float(report.timing["attributed_share"])
    total = measured_total_us(report)
    if not total:
        return None
    named = sum(node.time_us for node in report.ir.nodes if node.module and is_number(node.time_us))
    return named / total


def node_share(node: IRNode, total_us: float | None) -> float | None:
    """A node's share of the measured total: its own, else its time over the total."""
    if is_number(node.share):
        return node.share
    if is_number(node.time_us) and total_us:
        return node.time_us / total_us
    return None


# ---------------------------------------------------------------- summary


def _headline(report: InspectReport) -> str:
    """One line under the title: IR source and size, totals, measured time and how much is attributed."""
    ir: GraphIR = report.ir
    parts = [f"{ir.source} IR", f"{len(ir.nodes):,} nodes", f"{_params_text(ir)} parameters",
             format_flops(ir.total_flops), format_bytes(ir.total_bytes)]
    total_us = measured_total_us(report)
    if total_us is not None:
        parts.append(f"{format_time_us(total_us)} measured, {format_percent(attributed_share(report))} "
                     "in named modules")
    return f'<p class="subtitle">{html.escape(" · ".join(parts))}</p>'


def _summary_section(report: InspectReport) -> str:
    cards = [
        ("Graph", _kv_table(_summary_rows(report))),
        ("Inputs", _inputs_table(report.ir.inputs)),
        ("Timing", _kv_table(report.timing)),
        ("How node times were measured", _kv_table(report.ir.timing)),
    ]
    grid = "".join(f"<div><h3>{html.escape(title)}</h3>{part}</div>" for title, part in cards if part)
    return _section("Summary", f'<div class="grid">{grid}</div>')


def _summary_rows(report: InspectReport) -> list[tuple[str, Any]]:
    ir: GraphIR = report.ir
    total_bytes = ir.total_bytes
    return [
        ("Workload", _workload_name(report.workload)),
        ("Device", report.device.name),
        ("Date", report.created_at or MISSING),
        ("IR source", ir.source),
        ("Nodes", f"{len(ir.nodes):,}"),
        ("Parameters", _params_text(ir)),
        ("Total FLOPs", format_flops(ir.total_flops)),
        ("Total bytes", format_bytes(total_bytes)),
        ("Arithmetic intensity", format_intensity(ir.total_flops / total_bytes if total_bytes else None)),
        ("Measured time per call", format_time_us(measured_total_us(report))),
        ("Attributed to named modules", format_percent(attributed_share(report))),
        ("Graph breaks", str(len(ir.graph_breaks))),
    ]


def _params_text(ir: GraphIR) -> str:
    if not ir.params:
        return "0"
    count = format_si(ir.params, "").strip() if ir.params >= 1000 else str(ir.params)
    return f"{count} ({format_bytes(ir.param_bytes)})" if ir.param_bytes else count


def _inputs_table(inputs: Sequence[dict[str, Any]]) -> str:
    if not inputs:
        return ""
    rows = [[item.get("name", MISSING), _shape_text(item.get("shape")), item.get("dtype", MISSING)]
            for item in inputs]
    return _table(["Name", "Shape", "Dtype"], rows, cell_classes={1: "shapes"})


def _shape_text(shape: Any) -> str:
    """[1, 128, 384] -> "1x128x384"; a 0-d shape reads "scalar"; anything else as given."""
    if isinstance(shape, (list, tuple)):
        return "x".join(str(dim) for dim in shape) if shape else "scalar"
    return MISSING if shape is None else str(shape)


def _shapes_text(shapes: Sequence[Any]) -> str:
    return truncate(", ".join(_shape_text(shape) for shape in shapes), SHAPES_WIDTH) if shapes else MISSING


# ---------------------------------------------------------------- operator mix


def op_mix_figure(ir: GraphIR) -> charts.Figure | None:
    """Per operator kind, side by side: share of FLOPs and share of measured time (node counts in hover)."""
    mix = op_mix_with_time(ir)
    if not mix:
        return None
    kinds = [_chart_label(kind) for kind in mix]
    counts = [entry["count"] for entry in mix.values()]
    bars = [_share_bar("FLOPs", kinds, [entry["flops_share"] for entry in mix.values()], counts, "#3b6fb6")]
    if is_timed(ir):
        bars.append(_share_bar("time", kinds, [entry["time_share"] for entry in mix.values()], counts, "#c8553d"))
    layout = _base_layout("Operator mix: share of FLOPs and of measured time per kind", 400)
    layout.update(showlegend=True, barmode="group", legend={"orientation": "h", "y": 1.02, "x": 1,
                                                              "xanchor": "right", "yanchor": "bottom"})
    return charts.figure(bars, layout, y_axis={"title": "% of total", "rangemode": "tozero"})


def _share_bar(what: str, kinds: list[str], shares: list[float | None], counts: list[int],
               color: str) -> dict:
    return charts.bar(
        color, name=f"share of {what}", x=kinds, y=[(share or 0.0) * 100 for share in shares],
        customdata=counts,
        hovertemplate=f"%{{x}}<br>%{{y:.1f}}% of {what}<br>%{{customdata}} nodes<extra></extra>",
    )


def _op_mix_table(ir: GraphIR) -> str:
    timed = is_timed(ir)
    headers = ["Kind", "Nodes", "FLOPs share"] + ["Time share"] * timed
    rows = []
    for kind, entry in op_mix_with_time(ir).items():
        row = [kind, f"{entry['count']:,}", format_percent(entry["flops_share"])]
        rows.append(row + [format_percent(entry["time_share"])] * timed)
    return _table(headers, rows, numeric=range(1, len(headers)))


# ---------------------------------------------------------------- hotspots


def hotspot_figure(hotspots: Sequence[Hotspot], top: int = TOP_HOTSPOTS_CHARTED) -> charts.Figure | None:
    """Horizontal bars of the `top` modules by share of time (of FLOPs when untimed), largest on top."""
    timed = any(is_number(spot.share) for spot in hotspots)
    total_flops = sum(spot.flops for spot in hotspots)
    ranked = list(hotspots[:top])
    if not ranked or not (timed or total_flops):
        return None
    ranked.reverse()  # plotly draws the first category at the bottom
    labels = _unique_labels([_chart_label(truncate(_hotspot_label(spot), LABEL_WIDTH)) for spot in ranked])
    values = [(spot.share or 0.0) * 100 if timed else spot.flops / total_flops * 100 for spot in ranked]
    details = [[_chart_label(spot.module_type or MISSING), format_time_us(spot.time_us),
                format_flops(spot.flops), spot.bound or MISSING, spot.nodes] for spot in ranked]
    what = "time" if timed else "FLOPs"
    bar = charts.bar(
        "#c8553d", x=values, y=labels, orientation="h", customdata=details,
        hovertemplate=f"%{{y}}<br>%{{x:.1f}}% of {what}<br>%{{customdata[0]}}, %{{customdata[4]}} nodes"
                      "<br>%{customdata[1]}, %{customdata[2]}, %{customdata[3]}-bound<extra></extra>",
    )
    layout = _base_layout(f"Top {len(ranked)} modules by share of {what}", 120 + 24 * len(ranked))
    layout["margin"] = {"l": 320, "r": 20, "t": 50, "b": 50}
    return charts.figure([bar], layout, x_axis={"title": f"% of {what}", "rangemode": "tozero"})


def _hotspot_label(spot: Hotspot) -> str:
    return f"{module_label(spot.module)} ({spot.kind})" if spot.kind else module_label(spot.module)


def _hotspot_table(hotspots: Sequence[Hotspot]) -> str:
    if not hotspots:
        return '<p class="muted">The graph has no nodes, so no module owns any time.</p>'
    headers = ["Module", "Type", "Kind", "Time", "Share", "FLOPs", "Bytes", "Intensity", "Bound", "Nodes"]
    rows = [
        [module_label(spot.module), spot.module_type or MISSING, spot.kind or MISSING,
         format_time_us(spot.time_us), format_percent(spot.share),
         format_flops(spot.flops) if spot.flops else MISSING,
         format_bytes(spot.bytes) if spot.bytes else MISSING,
         format_intensity(spot.intensity), spot.bound or MISSING, f"{spot.nodes:,}"]
        for spot in hotspots
    ]
    caption = f'<p class="muted">{html.escape(cover_caption(hotspots))}</p>'
    return caption + _table(headers, rows, numeric=[3, 4, 5, 6, 7, 9])


# ---------------------------------------------------------------- breaks, signature, nodes


def _graph_breaks_html(breaks: Sequence[GraphBreak]) -> str:
    if not breaks:
        return '<p class="muted">No graph breaks: the model was captured as one graph.</p>'
    rows = [[index, item.reason, item.location or MISSING] for index, item in enumerate(breaks, start=1)]
    return _table(["#", "Reason", "Location"], rows, numeric=[0], cell_classes={1: "reason", 2: "shapes"})


def _signature_html(signature: dict[str, Any]) -> str:
    """The signature's version, then its name/value pairs in a few compact columns."""
    if not signature:
        return '<p class="muted">No signature was computed.</p>'
    names = list(signature.get("names") or [])
    values = list(signature.get("values") or [])
    pairs = [(str(name), _signature_value(value)) for name, value in zip(names, values)]
    version = f'<p class="muted">Version {html.escape(str(signature.get("version", MISSING)))}, ' \
              f"{len(pairs)} features.</p>"
    extra = {k: v for k, v in signature.items() if k not in ("version", "names", "values")}
    columns = _split_evenly(pairs, SIGNATURE_COLUMNS)
    grid = "".join(f"<div>{_table(['Name', 'Value'], column, numeric=[1])}</div>" for column in columns if column)
    return version + f'<div class="grid">{grid}</div>' + _kv_table(extra)


def _signature_value(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return MISSING if value is None else str(value)
    if not is_number(value):
        return MISSING
    return f"{value:.4g}"


def _split_evenly(items: list[Any], parts: int) -> list[list[Any]]:
    size = max(1, math.ceil(len(items) / parts))
    return [items[start:start + size] for start in range(0, len(items), size)]


def _nodes_table(ir: GraphIR, total_us: float | None, top: int = TOP_NODES_LISTED) -> str:
    if not ir.nodes:
        return '<p class="muted">The graph has no nodes.</p>'
    timed = is_timed(ir)
    key = (lambda node: node.time_us if is_number(node.time_us) else -1.0) if timed else (lambda node: node.flops)
    ranked = sorted(ir.nodes, key=key, reverse=True)[:top]
    order = "measured time" if timed else "FLOPs (no node was timed)"
    intro = f'<p class="muted">The {len(ranked)} of {len(ir.nodes):,} nodes with the most {html.escape(order)}.</p>'
    headers = ["Name", "Op", "Kind", "Module", "Input shapes", "Output shapes", "FLOPs", "Bytes",
               "Intensity", "Bound", "Time", "Share"]
    rows = [
        [node.name, node.op, node.kind, module_label(node.module), _shapes_text(node.input_shapes),
         _shapes_text(node.output_shapes), format_flops(node.flops) if node.flops else MISSING,
         format_bytes(node.bytes) if node.bytes else MISSING, format_intensity(node.intensity),
         node.bound or MISSING, format_time_us(node.time_us), format_percent(node_share(node, total_us))]
        for node in ranked
    ]
    return intro + _table(headers, rows, numeric=range(6, 12), cell_classes={4: "shapes", 5: "shapes"})

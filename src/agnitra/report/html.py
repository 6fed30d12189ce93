"""Self-contained HTML pages for `bench` and `profile` reports.

A page needs no network: plotly.js is inlined once in the <head> (only when the page has a
chart), the CSS is inline and fonts are the system's. Every piece of text that comes from the
report (model names, reasons, conditions) goes through `html.escape`; chart labels are escaped
too, because plotly reads a subset of HTML in them.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from typing import Any, Iterable, Sequence

import plotly.offline

from agnitra.report import charts
from agnitra.results import BenchReport, DeviceReport, Latency, OpRow, ProfileReport, VariantResult
from agnitra.report.units import (
    MISSING,
    format_bandwidth,
    format_bytes,
    format_correctness,
    format_energy,
    format_flop_rate,
    format_flops,
    format_intensity,
    format_mib,
    format_number,
    format_percent,
    format_si,
    format_throughput,
    format_time_ms,
    format_time_us,
    is_number,
    truncate,
)

TOP_OPS_CHARTED = 15

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       margin: 0 auto; max-width: 1200px; padding: 1.5rem; color: #1f2933; background: #fff; }
h1 { font-size: 1.6rem; margin: 0 0 .3rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 .6rem; border-bottom: 1px solid #d9e2ec; padding-bottom: .3rem; }
h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
.subtitle { color: #52606d; margin: 0 0 1rem; }
.grid { display: flex; flex-wrap: wrap; gap: 1.5rem; align-items: flex-start; }
.grid > div { flex: 1 1 300px; min-width: 0; }
table { border-collapse: collapse; font-size: .88rem; margin: .3rem 0 1rem; }
th, td { padding: .3rem .6rem; border-bottom: 1px solid #e4e7eb; text-align: left; vertical-align: top; }
th { background: #f5f7fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { background: none; color: #52606d; font-weight: 500; white-space: nowrap; }
td.reason { max-width: 28rem; color: #52606d; }
td.shapes { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .8rem; max-width: 26rem;
            overflow-wrap: anywhere; }
.status-ok { color: #1b7f3b; font-weight: 600; }
.status-skipped { color: #a86b00; font-weight: 600; }
.status-failed { color: #c0392b; font-weight: 600; }
.pass { color: #1b7f3b; } .fail { color: #c0392b; font-weight: 600; }
.muted { color: #7b8794; }
.chart { margin: .5rem 0 1rem; }
ul.notes { color: #52606d; }
footer { margin-top: 2rem; font-size: .8rem; color: #7b8794; }
"""


class _Raw(str):
    """HTML that is already safe: built here from escaped parts."""


def _esc(value: Any) -> str:
    """A cell or text value, escaped unless it is already `_Raw` HTML."""
    if isinstance(value, _Raw):
        return value
    return html.escape(_plain_text(value))


def _plain_text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if is_number(value) and abs(value) >= 1e6:
        return format_si(value, "").strip()  # ceilings and counts: 1.2e11 -> "120 G"
    if isinstance(value, float):
        return format_number(value, 4)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def _chart_label(text: str) -> str:
    """A label plotly shows literally (plotly reads tags like <b> and entities like &lt;)."""
    return html.escape(text, quote=False)


# ---------------------------------------------------------------- tables


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = (),
           cell_classes: dict[int, str] | None = None) -> str:
    """An HTML table; columns whose index is in `numeric` are right-aligned."""
    numeric = set(numeric)
    classes = dict(cell_classes or {})
    for index in numeric:
        classes[index] = "num"
    head = "".join(_cell("th", header, classes.get(i)) for i, header in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(_cell("td", value, classes.get(i)) for i, value in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(tag: str, value: Any, css_class: str | None) -> str:
    attribute = f' class="{css_class}"' if css_class else ""
    return f"<{tag}{attribute}>{_esc(value)}</{tag}>"


def _kv_table(items: dict[str, Any] | Iterable[tuple[str, Any]]) -> str:
    """A two-column key/value table, nested dicts flattened to dotted keys; "" when empty."""
    pairs = _flatten(items.items() if isinstance(items, dict) else items)
    if not pairs:
        return ""
    body = "".join(f"<tr><th>{_esc(str(key))}</th><td>{_esc(value)}</td></tr>" for key, value in pairs)
    return f'<table class="kv"><tbody>{body}</tbody></table>'


def _flatten(pairs: Iterable[tuple[Any, Any]], prefix: str = "") -> list[tuple[str, Any]]:
    flat: list[tuple[str, Any]] = []
    for key, value in pairs:
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.extend(_flatten(value.items(), prefix=f"{name}."))
        else:
            flat.append((name, value))
    return flat


def _checks_section(conditions: dict[str, Any]) -> str:
    """What verification ran every variant on: held-out, exploring sets, other shape, the model's behaviour."""
    checks = conditions.get("verification")
    return _section("What verification checked", _kv_table(checks)) if checks else ""


def _section(title: str, *parts: str) -> str:
    content = "".join(part for part in parts if part)
    return f"<section><h2>{html.escape(title)}</h2>{content}</section>" if content else ""


def _status_html(status: str) -> _Raw:
    css = status if status in ("ok", "skipped", "failed") else "failed"
    return _Raw(f'<span class="status-{css}">{html.escape(status)}</span>')


# ---------------------------------------------------------------- charts


class _Charts:
    """Turns figures into <div>s with predictable ids; the page inlines plotly.js if any were made."""

    def __init__(self) -> None:
        self.count = 0

    def embed(self, figure: charts.Figure | None) -> str:
        if figure is None:
            return ""
        self.count += 1
        return f'<div class="chart">{charts.div(figure, f"chart-{self.count}")}</div>'


def _base_layout(title: str, height: int) -> dict[str, Any]:
    return {
        "title": {"text": html.escape(title, quote=False), "x": 0.01, "font": {"size": 15}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
        "showlegend": False,
    }


def _unique_labels(labels: Sequence[str]) -> list[str]:
    """Labels made distinct (plotly merges equal category labels) by numbering repeats."""
    totals = Counter(labels)
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        seen[label] += 1
        unique.append(f"{label} #{seen[label]}" if totals[label] > 1 else label)
    return unique


def latency_figure(variants: Sequence[VariantResult]) -> charts.Figure | None:
    """Median latency per variant with status ok, the p95 as an upward error bar."""
    timed = _timed_ok(variants)
    if not timed:
        return None
    names = _unique_labels([_chart_label(v.name) for v in timed])
    medians = [v.latency_ms.median for v in timed]
    above = [_p95_above_median(v.latency_ms) for v in timed]
    bar = charts.bar(
        "#3b6fb6", x=names, y=medians,
        error_y={"type": "data", "symmetric": False, "array": above, "arrayminus": [0.0] * len(timed)},
        text=[format_number(m, 4) for m in medians], textposition="outside",
        hovertemplate="%{x}<br>median %{y:.4g} ms<extra></extra>",
    )
    return charts.figure([bar], _base_layout("Latency per call (median, error bar to p95)", 380), y_axis={"title": "ms", "rangemode": "tozero"})


def _timed_ok(variants: Sequence[VariantResult]) -> list[VariantResult]:
    """The variants with status ok and a finite median latency."""
    return [v for v in variants
            if v.status == "ok" and v.latency_ms is not None and is_number(v.latency_ms.median)]


def _p95_above_median(latency: Latency) -> float:
    return max(0.0, latency.p95 - latency.median) if is_number(latency.p95) else 0.0


def throughput_figure(variants: Sequence[VariantResult]) -> charts.Figure | None:
    """Throughput per variant with status ok."""
    measured = [v for v in variants
                if v.status == "ok" and v.throughput is not None and is_number(v.throughput.value)]
    if not measured:
        return None
    units = {v.throughput.unit for v in measured}
    unit = units.pop() if len(units) == 1 else "per second"
    bar = charts.bar(
        "#2f9e77",
        x=_unique_labels([_chart_label(v.name) for v in measured]),
        y=[v.throughput.value for v in measured],
        text=[_chart_label(format_throughput(v.throughput.value, v.throughput.unit)) for v in measured],
        textposition="outside",
        hovertemplate="%{x}<br>%{text}<extra></extra>",
    )
    return charts.figure([bar], _base_layout("Throughput", 380), y_axis={"title": _chart_label(unit), "rangemode": "tozero"})


def ops_share_figure(rows: Sequence[OpRow], top: int = TOP_OPS_CHARTED) -> charts.Figure | None:
    """Horizontal bars of the `top` operators by share of self time, largest on top."""
    ranked = _ops_by_share(rows)[:top]
    if not ranked:
        return None
    ranked = list(reversed(ranked))  # plotly draws the first category at the bottom
    labels = _unique_labels([_chart_label(label) for label in _op_labels(ranked)])
    details = [[format_time_us(r.self_time_us), r.calls, _chart_label(truncate(r.input_shapes, 80))]
               for r in ranked]
    bar = charts.bar(
        "#c8553d", x=[row.share * 100 for row in ranked], y=labels, orientation="h",
        customdata=details,
        hovertemplate="%{y}<br>%{x:.1f}% of self time, %{customdata[0]} over %{customdata[1]} calls"
                      "<br>%{customdata[2]}<extra></extra>",
    )
    layout = _base_layout(f"Top {len(ranked)} operators by share of self time", 120 + 24 * len(ranked))
    layout["margin"] = {"l": 220, "r": 20, "t": 50, "b": 50}
    return charts.figure([bar], layout, x_axis={"title": "% of self time", "rangemode": "tozero"})


def _op_labels(rows: Sequence[OpRow]) -> list[str]:
    """Operator names; an operator listed for several input shapes is labelled with its shapes."""
    repeated = {op for op, count in Counter(row.op for row in rows).items() if count > 1}
    return [truncate(f"{row.op} {row.input_shapes}" if row.op in repeated else row.op, 48) for row in rows]


def _ops_by_share(rows: Sequence[OpRow]) -> list[OpRow]:
    return sorted(rows, key=lambda row: row.share if is_number(row.share) else 0.0, reverse=True)


# ---------------------------------------------------------------- shared sections


def _workload_name(workload: dict[str, Any]) -> str:
    return str(workload.get("name") or workload.get("id") or "workload")


def _header(kind: str, workload: dict[str, Any], device: DeviceReport, created_at: str) -> str:
    name = _workload_name(workload)
    subtitle = " · ".join(part for part in (device.name, device.kind, created_at) if part)
    return (f"<header><h1>{html.escape(kind)}: {html.escape(name)}</h1>"
            f'<p class="subtitle">{html.escape(subtitle)}</p></header>')


def _context_section(workload: dict[str, Any], device: DeviceReport, conditions: dict[str, Any],
                     versions: dict[str, str]) -> str:
    workload_rest = {k: v for k, v in workload.items() if k != "name"}
    device_rows = [("name", device.name), ("kind", device.kind), *device.signature.items()]
    blocks = [
        ("Workload", _kv_table(workload_rest)),
        ("Device", _kv_table(device_rows)),
        ("Device ceilings", _kv_table(device.ceilings)),
        ("Conditions", _kv_table(conditions)),
        ("Versions", _kv_table(versions)),
    ]
    cards = "".join(f"<div><h3>{html.escape(title)}</h3>{table}</div>" for title, table in blocks if table)
    return _section("Setup", f'<div class="grid">{cards}</div>' if cards else "")


def _ops_table_html(rows: Sequence[OpRow]) -> str:
    headers = ["Operator", "Calls", "Self time", "Share", "FLOPs", "Bytes", "Intensity", "Achieved",
               "Input shapes"]
    body = [
        [row.op, f"{row.calls:,}", format_time_us(row.self_time_us), format_percent(row.share),
         format_flops(row.flops) if row.flops else MISSING,
         format_bytes(row.bytes) if row.bytes else MISSING,
         format_intensity(row.intensity), row.achieved or MISSING, row.input_shapes]
        for row in _ops_by_share(rows)
    ]
    return _table(headers, body, numeric=range(1, 8), cell_classes={8: "shapes"})


def _page(title: str, body: str, with_plotly: bool) -> str:
    script = ""
    if with_plotly:
        script = ("<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
                  f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>\n')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n{script}</head>\n"
        f"<body>\n{body}\n<footer>Generated by Agnitra. This page is self-contained.</footer>\n"
        "</body>\n</html>\n"
    )


# ---------------------------------------------------------------- bench


def bench_html(report: BenchReport) -> str:
    """The `bench` report as one self-contained HTML page."""
    charts = _Charts()
    body = "".join([
        _header("Benchmark", report.workload, report.device, report.created_at),
        _summary_line(report),
        _section("Latency and throughput", _chart_grid(charts, latency_figure(report.variants),
                                                       throughput_figure(report.variants))),
        _section("Results", _results_table(report.variants), _notes_list(report.notes)),
        _checks_section(report.conditions),
        _section("Decode", _decode_table(report.variants)),
        _section("Roofline", _roofline_table(report)),
        _section("Operator breakdown", *_op_breakdown_parts(report, charts)),
        _context_section(report.workload, report.device, report.conditions, report.versions),
        f'<p class="muted">Schema {html.escape(report.schema)}</p>',
    ])
    title = f"Agnitra bench: {_workload_name(report.workload)}"
    return _page(title, body, with_plotly=charts.count > 0)


def _op_breakdown_parts(report: BenchReport, charts: _Charts) -> list[str]:
    if not report.op_breakdown:
        return []
    scope = '<p class="muted">Decoders: one decode step.</p>' if _has_decode(report) else ""
    return [scope, charts.embed(ops_share_figure(report.op_breakdown)), _ops_table_html(report.op_breakdown)]


def _chart_grid(charts: _Charts, *figures: charts.Figure | None) -> str:
    divs = [charts.embed(figure) for figure in figures if figure is not None]
    if not divs:
        return '<p class="muted">No variant ran successfully, so there is nothing to chart.</p>'
    return '<div class="grid">' + "".join(f"<div>{div}</div>" for div in divs) + "</div>"


def _summary_line(report: BenchReport) -> str:
    counts = Counter(v.status for v in report.variants)
    parts = [f"{counts[status]} {status}" for status in ("ok", "skipped", "failed") if counts[status]]
    fastest = _fastest(report.variants)
    text = f"{len(report.variants)} variants: " + ", ".join(parts)
    if fastest is not None:
        text += f". Fastest: {fastest.name} at {format_time_ms(fastest.latency_ms.median)} median"
        speedup = _speedup(report.variants, fastest)
        baseline = _baseline(report.variants)
        if speedup is not None and baseline is not None and fastest.name != baseline.name:
            text += f", {speedup:.2f}× {baseline.name}"
    return f'<p class="subtitle">{html.escape(text)}.</p>'


def _fastest(variants: Sequence[VariantResult]) -> VariantResult | None:
    timed = _timed_ok(variants)
    return min(timed, key=lambda v: v.latency_ms.median) if timed else None


def _baseline(variants: Sequence[VariantResult]) -> VariantResult | None:
    """The first variant that ran: the reference of the correctness checks, and of speedups."""
    return next((v for v in variants if v.status == "ok" and v.latency_ms), None)


def _speedup(variants: Sequence[VariantResult], variant: VariantResult) -> float | None:
    """How many times faster than the baseline `variant` is (median latency), if known."""
    baseline = _baseline(variants)
    if baseline is None or not baseline.latency_ms or not variant.latency_ms:
        return None
    base, mine = baseline.latency_ms.median, variant.latency_ms.median
    if not (is_number(base) and is_number(mine)) or mine <= 0:
        return None
    return base / mine


def _results_table(variants: Sequence[VariantResult]) -> str:
    with_power = any(v.power_w is not None for v in variants)
    with_util = any(v.utilization is not None for v in variants)
    baseline = _baseline(variants)
    headers = ["Variant", "Status", "Median ms", "p95 ms", f"vs {baseline.name if baseline else 'baseline'}", "Throughput", "Setup s",
               "Peak MiB", "Weights MiB", "Energy/item", "Roofline", "Correctness"]
    headers += ["Power W"] * with_power + ["Utilization"] * with_util + ["Reason"]
    rows = []
    for v in variants:
        speedup = _speedup(variants, v)
        row = [
            v.name, _status_html(v.status),
            format_number(v.latency_ms.median, 4) if v.latency_ms else MISSING,
            format_number(v.latency_ms.p95, 4) if v.latency_ms else MISSING,
            f"{speedup:.2f}×" if speedup is not None else MISSING,
            format_throughput(v.throughput.value, v.throughput.unit) if v.throughput else MISSING,
            format_number(v.setup_s, 3),
            format_mib(v.peak_memory_bytes),
            format_mib(v.model_bytes),
            format_energy(v.energy_j_per_item),
            format_percent(v.roofline_fraction),
            _correctness_html(v),
        ]
        row += [format_number(v.power_w, 4)] * with_power + [_format_utilization(v.utilization)] * with_util
        row.append(v.reason or "")
        rows.append(row)
    reason_index = len(headers) - 1
    numeric = [*range(2, 10), *range(11, reason_index)]  # all but name, status, correctness, reason
    return _table(headers, rows, numeric=numeric, cell_classes={reason_index: "reason"})


def _format_utilization(value: float | None) -> str:
    """Utilisation in percent (NVML's unit, and the schema's)."""
    return f"{value:.1f}%" if is_number(value) else MISSING


def _correctness_html(variant: VariantResult) -> _Raw:
    check = variant.correctness
    if check is None:
        return _Raw(MISSING)
    text = format_correctness(check.metric, check.value, check.passed)
    threshold = f"threshold {format_number(check.threshold, 3)}" if check.threshold is not None else ""
    title = f' title="{html.escape(threshold)}"' if threshold else ""
    css = "pass" if check.passed else "fail"
    return _Raw(f'<span class="{css}"{title}>{html.escape(text)}</span>')


def _has_decode(report: BenchReport) -> bool:
    return any(v.decode is not None for v in report.variants)


def _decode_table(variants: Sequence[VariantResult]) -> str:
    decoded = [v for v in variants if v.decode is not None]
    if not decoded:
        return ""
    headers = ["Variant", "Tokens/s", "Per-token median ms", "Per-token p95 ms", "Prefill ms",
               "Prompt", "New tokens", "Batch"]
    rows = [
        [v.name, format_number(d.tokens_per_s, 4), format_number(d.per_token_ms.median, 4),
         format_number(d.per_token_ms.p95, 4), format_number(d.prefill_ms, 4),
         d.prompt_len, d.new_tokens, d.batch]
        for v in decoded if (d := v.decode) is not None
    ]
    return _table(headers, rows, numeric=range(1, 8))


def _roofline_table(report: BenchReport) -> str:
    roof = report.roofline
    if roof is None:
        return ""
    known = is_number(roof.flops) and is_number(roof.bytes) and roof.bytes > 0
    intensity = roof.flops / roof.bytes if known else None
    floor_s = roof.floor_ms / 1e3 if is_number(roof.floor_ms) and roof.floor_ms > 0 else None
    rows = [
        ("FLOPs per unit", format_flops(roof.flops)),
        ("Compulsory bytes per unit", format_bytes(roof.bytes)),
        ("Arithmetic intensity", format_intensity(intensity)),
        ("Floor", format_time_ms(roof.floor_ms)),
        ("Bound", roof.bound),
        ("Dtype", roof.dtype),
    ]
    best = _fastest(report.variants)
    if best is not None and is_number(best.latency_ms.median) and best.latency_ms.median > 0:
        seconds = best.latency_ms.median / 1e3
        rows.append((f"Achieved by {best.name}",
                     f"{format_flop_rate(roof.flops / seconds)}, {format_bandwidth(roof.bytes / seconds)}"))
    elif floor_s is not None:
        rows.append(("Rates at the floor", f"{format_flop_rate(roof.flops / floor_s)}, "
                                           f"{format_bandwidth(roof.bytes / floor_s)}"))
    if roof.notes:
        rows.append(("Notes", roof.notes))
    return _kv_table(rows)


def _notes_list(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{html.escape(str(note))}</li>" for note in notes) + "</ul>"


# ---------------------------------------------------------------- profile


def profile_html(report: ProfileReport) -> str:
    """The `profile` report as one self-contained HTML page."""
    charts = _Charts()
    body = "".join([
        _header("Profile", report.workload, report.device, report.created_at),
        _section("Summary", f'<div class="grid"><div>{_profile_summary(report)}</div>'
                            f"<div><h3>NVML</h3>{_nvml_block(report)}</div></div>"),
        _section("Operators", charts.embed(ops_share_figure(report.ops)), _profile_ops_table(report.ops)),
        _context_section(report.workload, report.device, report.conditions, report.versions),
        f'<p class="muted">Schema {html.escape(report.schema)}</p>',
    ])
    title = f"Agnitra profile: {_workload_name(report.workload)}"
    return _page(title, body, with_plotly=charts.count > 0)


def _profile_ops_table(rows: Sequence[OpRow]) -> str:
    return _ops_table_html(rows) if rows else '<p class="muted">No operators were recorded.</p>'


def _profile_summary(report: ProfileReport) -> str:
    latency = report.latency_ms
    rows: list[tuple[str, Any]] = [
        ("Latency median", format_time_ms(latency.median)),
        ("Latency p95", format_time_ms(latency.p95)),
        ("Latency min / mean", f"{format_time_ms(latency.min)} / {format_time_ms(latency.mean)}"),
        ("Timed runs", latency.samples),
        ("Peak memory", format_bytes(report.peak_memory_bytes)),
        ("Total FLOPs", format_flops(report.total_flops)),
        ("Total bytes", format_bytes(report.total_bytes)),
    ]
    if is_number(report.total_bytes) and report.total_bytes:
        rows.append(("Arithmetic intensity", format_intensity(report.total_flops / report.total_bytes)))
    if is_number(latency.median) and latency.median > 0:
        seconds = latency.median / 1e3
        rows.append(("Achieved at median", f"{format_flop_rate(report.total_flops / seconds)}, "
                                           f"{format_bandwidth(report.total_bytes / seconds)}"))
    return _kv_table(rows)


def _nvml_block(report: ProfileReport) -> str:
    if report.nvml is None:
        reason = report.nvml_reason or "NVML was not available."
        return f'<p class="muted">{html.escape(reason)}</p>'
    if not report.nvml:
        return '<p class="muted">NVML reported nothing.</p>'
    return _kv_table(report.nvml)

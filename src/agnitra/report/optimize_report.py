"""`agnitra optimize` outputs: report.json, metrics.csv, candidates.csv, and a self-contained
report.html (verdict, speedup bars of the final run, Pareto scatter, per-candidate table), built
from the bench page's parts."""

from __future__ import annotations

import html
import json
from pathlib import Path

from agnitra.report import charts
from agnitra.report.console_units import candidate_cells
from agnitra.report.files import _write_csv, _write_json, _write_text, write_bench_report
from agnitra.report.html import (
    _base_layout, _chart_grid, _chart_label, _Charts, _checks_section, _context_section, _header, _notes_list, _page,
    _results_table, _section, _table, _workload_name, latency_figure,
)
from agnitra.results import OptimizeReport, own_memory_bytes

CANDIDATE_HEADERS = ["candidate", "status", "speedup", "predicted", "median ms", "baseline ms", "model MiB", "correctness", "prior", "setup s", "reason"]


def speedup_figure(report: OptimizeReport) -> charts.Figure | None:
    base = report.bench.variants[0]
    ok = [v for v in report.bench.variants if v.status == "ok" and v.latency_ms]
    if base.status != "ok" or len(ok) < 2:
        return None
    names = [_short(_chart_label(v.name)) for v in ok]
    speedups = [base.latency_ms.median / v.latency_ms.median for v in ok]
    colors = ["#2b8a3e" if v.name == report.chosen else "#868e96" for v in ok]
    bar = charts.bar(
        colors, x=speedups, y=names, orientation="h", text=[f"{x:.2f}x" for x in speedups], textposition="outside",
        customdata=[_chart_label(v.name) for v in ok], hovertemplate="%{customdata}: %{x:.2f}x<extra></extra>",
    )
    layout = {**_base_layout(f"Speedup over {_chart_label(base.name)} (final interleaved run)", 120 + 40 * len(ok)), "margin": {"l": 20, "r": 40, "t": 50, "b": 50}}
    return charts.figure([bar], layout, x_axis={"title": "x faster than the baseline", "range": [0, max(speedups) * 1.15]})


def _short(label: str, limit: int = 48) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def pareto_figure(report: OptimizeReport) -> charts.Figure | None:
    points = [c for c in report.candidates if c.status == "ok" and c.latency_ms]
    if not points:
        return None
    traces = []
    for group, members, color in (("Pareto front", [c for c in points if c.name in report.pareto], "#2b8a3e"), ("passed", [c for c in points if c.passed and c.name not in report.pareto], "#1c7ed6"), ("failed verification", [c for c in points if not c.passed], "#e03131")):
        if members:
            traces.append(charts.scatter(
                x=[c.latency_ms.median for c in members], y=[own_memory_bytes(c) / 2**20 for c in members],
                mode="markers", name=group, marker={"color": color, "size": 10},
                text=[_chart_label(c.name) for c in members], hovertemplate="%{text}<br>%{x:.3f} ms, %{y:.1f} MiB<extra></extra>",
            ))
    title = "Candidates: latency vs model memory (weights and buffers on the device, else the run's peak)"
    return charts.figure(traces, {**_base_layout(title, 420), "showlegend": True},
                         x_axis={"title": "median latency, ms (lower is better)"}, y_axis={"title": "model memory, MiB"})


def prediction_figure(report: OptimizeReport) -> charts.Figure | None:
    """Predicted against measured speedup of each candidate the cost model guided (none: no chart)."""
    points = [c for c in report.candidates if c.predicted and c.speedup]
    if not points:
        return None
    traces = []
    for group, members, color in (("passed", [c for c in points if c.passed], "#1c7ed6"), ("failed verification", [c for c in points if not c.passed], "#e03131")):
        if members:
            traces.append(charts.scatter(
                x=[c.predicted["speedup"] for c in members], y=[c.speedup for c in members], mode="markers", name=group, marker={"color": color, "size": 10},
                text=[f"{_chart_label(c.name)}<br>P(pass) {c.predicted['p_pass']:.2f}" for c in members], hovertemplate="%{text}<br>predicted %{x:.2f}x, measured %{y:.2f}x<extra></extra>",
            ))
    values = [c.predicted["speedup"] for c in points] + [c.speedup for c in points]
    low, high = min(values) * 0.9, max(values) * 1.1
    traces.append(charts.scatter(x=[low, high], y=[low, high], mode="lines", name="measured = predicted", line={"color": "#868e96", "dash": "dot"}, hoverinfo="skip"))
    return charts.figure(traces, {**_base_layout("Cost model: predicted vs measured speedup", 420), "showlegend": True},
                         x_axis={"title": "predicted before measuring (x faster)", "type": "log"}, y_axis={"title": "measured in its own run (x faster)", "type": "log"})


def optimize_html(report: OptimizeReport) -> str:
    bench = report.bench
    charts = _Charts()
    skipped = [(s["transform"], s["reason"]) for s in report.search.get("not_applicable", [])]
    body = "".join([
        _header("Optimize", bench.workload, bench.device, bench.created_at),
        f'<p class="summary"><strong>{html.escape(report.verdict)}</strong></p>',
        _section("Final run", _chart_grid(charts, speedup_figure(report)), _chart_grid(charts, latency_figure(bench.variants)), _results_table(bench.variants), _notes_list(bench.notes)),
        _section("Search", _chart_grid(charts, pareto_figure(report), prediction_figure(report)), _table(CANDIDATE_HEADERS, [candidate_cells(c) for c in report.candidates], numeric=range(4, 10))),
        _advisor_section(report),
        _section("Not applicable here", _table(["transform", "reason"], skipped) if skipped else '<p class="muted">Every transform applied.</p>'),
        _section("Recipe", f"<pre>{html.escape(json.dumps(report.recipe, indent=2))}</pre>"),
        _checks_section(bench.conditions),
        _context_section(bench.workload, bench.device, {**bench.conditions, **{f"search.{k}": v for k, v in report.search.items() if k not in ("not_applicable", "advisor")}}, bench.versions),
        f'<p class="muted">Schema {html.escape(report.schema)}</p>',
    ])
    return _page(f"Agnitra optimize: {_workload_name(bench.workload)}", body, with_plotly=charts.count > 0)


def _advisor_section(report: OptimizeReport) -> str:
    """The LLM advisor's outcome and each proposal's status ('' where no advisor was asked)."""
    advisor = report.search.get("advisor")
    if not advisor:
        return ""
    who = report.search.get("proposed_by") or "nobody (the original model is returned)"
    rows = [(p["recipe"], p["status"], f"{p['speedup']:.2f}x" if p.get("speedup") else "", p.get("reason") or "", p.get("rationale") or "") for p in advisor["proposals"]]
    return _section(
        "LLM advisor",
        f"<p>{html.escape(advisor['outcome'])}</p><p>{html.escape(advisor['model'])} at {html.escape(advisor['url'])}; the chosen recipe was proposed by <strong>{html.escape(who)}</strong>.</p>",
        _table(["proposed recipe", "status", "speedup", "reason", "rationale"], rows) if rows else "",
    )


def write_optimize_report(report: OptimizeReport, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = write_bench_report(report.bench, out_dir)  # metrics.csv of the final run; json/html replaced below
    _write_json(report.to_dict(), paths["json"])
    _write_text(optimize_html(report), paths["html"])
    candidates = _write_csv(CANDIDATE_HEADERS, (candidate_cells(c) for c in report.candidates), out_dir / "candidates.csv")
    recipe = _write_json(report.recipe, out_dir / "recipe.json")
    return {**paths, "candidates": candidates, "recipe": recipe}

"""`agnitra layout --out DIR`: layout.json (the whole report), layout.csv (a row per mode and step),
metrics.json (each measured model's figures and each mode's gates, flat) and report.html."""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path

from agnitra.fileio import atomic_write_text, ensure_writable_dir
from agnitra.report.html import _notes_list, _page, _section, _table
from agnitra.report.units import MISSING, format_bytes, format_correctness, format_number

STEP_COLUMNS = ("mode", "step", "permuted_spaces", "solver_gain", "importance_kept", "weight_error", "cache_bytes_before", "cache_bytes_after", "served",
                "latency_ms", "model_bytes", "kv_cache_bytes", "energy_j_per_item", "l2_hit_rate_pct", "quality_metric", "quality_value",
                "quality_ci95_low", "quality_ci95_high", "quality_vs_none", "quality_vs_none_ci95_low", "quality_vs_none_ci95_high")
FIGURES = ("status", "latency_ms", "model_bytes", "kv_cache_bytes", "peak_memory_bytes", "energy_j_per_item", "l2_hit_rate_pct", "l2_why")


def write_layout_report(doc: dict, out: str | Path) -> dict[str, Path]:
    folder = ensure_writable_dir(out)
    paths = {"json": folder / "layout.json", "csv": folder / "layout.csv", "metrics": folder / "metrics.json", "html": folder / "report.html"}
    atomic_write_text(paths["json"], json.dumps(doc, indent=2, default=str))
    atomic_write_text(paths["csv"], layout_csv(doc))
    atomic_write_text(paths["metrics"], json.dumps(metrics(doc), indent=2, default=str))
    atomic_write_text(paths["html"], layout_html(doc))
    return paths


def metrics(doc: dict) -> dict:
    """The figures a dashboard reads: the original's and each mode's, its gates as met/missed/None."""
    found = {"original": {k: doc["original"].get(k) for k in FIGURES}}
    for m in doc["modes"]:
        quality = m.get("quality") or {}
        found[m["mode"]] = {**{k: m.get(k) for k in FIGURES}, "speedup": m.get("speedup"), "served": m.get("served"),
                            "quality_metric": quality.get("metric"), "quality_value": quality.get("value"),
                            "gates": {g["name"]: g["met"] for g in m["gates"]}, "gates_met": sum(1 for g in m["gates"] if g["met"])}
    return found


def layout_csv(doc: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(STEP_COLUMNS)
    for m in doc["modes"]:
        q = m.get("quality") or {}
        for s in m["steps"]:
            writer.writerow([m["mode"], s["step"], s["permuted_spaces"], f"{s['solver_gain']:.6g}", f"{s['importance_kept']:.6g}", f"{s['weight_error']:.6g}",
                             _cell(s.get("cache_bytes_before")), _cell(s.get("cache_bytes_after")),
                             m.get("served", ""), _cell(m.get("latency_ms")), _cell(m.get("model_bytes")), _cell(m.get("kv_cache_bytes")), _cell(m.get("energy_j_per_item")),
                             _cell(m.get("l2_hit_rate_pct")), q.get("metric", ""), _cell(q.get("value")), *_interval_cells(q.get("ci95")),
                             _cell((q.get("against_none") or {}).get("value")), *_interval_cells((q.get("against_none") or {}).get("ci95"))])
    return buffer.getvalue()


def layout_html(doc: dict) -> str:
    workload = doc.get("workload") or {}
    title = f"Layout: {workload.get('name', '')} ({doc.get('transforms')})"
    original = doc["original"]
    figures = _table(["model", "served", "latency ms", "speedup", "model memory", "KV cache", "energy J/item", "L2 hit %", "quality"],
                     [["original", "", format_number(original.get("latency_ms")), "1.00x", format_bytes(original.get("model_bytes")), format_bytes(original.get("kv_cache_bytes")),
                       format_number(original.get("energy_j_per_item")), format_number(original.get("l2_hit_rate_pct")), ""]]
                     + [[m["mode"], m.get("served") or "dense weights", format_number(m.get("latency_ms")), f"{m['speedup']:.2f}x" if m.get("speedup") else MISSING,
                         format_bytes(m.get("model_bytes")), format_bytes(m.get("kv_cache_bytes")), format_number(m.get("energy_j_per_item")),
                         format_number(m.get("l2_hit_rate_pct")), _quality(m.get("quality"))]
                        for m in doc["modes"]], numeric=(2, 3, 4, 5, 6, 7))
    gate_rows = [[m["mode"], g["name"], g["target"], format_number(g["value"]), {True: "met", False: "missed", None: "not measured"}[g["met"]], g.get("why", "")]
                 for m in doc["modes"] for g in m["gates"]]
    steps = _table(["mode", "step", "spaces permuted", "solver gain", "importance kept", "weight error", "KV cache before -> after", "seconds", "notes"],
                   [[m["mode"], s["step"], s["permuted_spaces"], f"{s['solver_gain']:.4f}", f"{s['importance_kept']:.4f}", f"{s['weight_error']:.4f}",
                     f"{format_bytes(s['cache_bytes_before'])} -> {format_bytes(s['cache_bytes_after'])}" if s.get("cache_bytes_before") is not None else "",
                     s["seconds"], "; ".join(s.get("notes") or [])] for m in doc["modes"] for s in m["steps"]], numeric=(2, 3, 4, 5, 7))
    body = "".join([
        f"<header><h1>{html.escape(title)}</h1><p>{html.escape(str(doc.get('device') or ''))}; calibration: {html.escape(str(doc.get('calibration', '')))}</p></header>",
        _section("Each mode against the original (one interleaved run)", figures),
        _section("Gates: latency -20%, L2 hit +10 points, energy per item -15%, quality loss <= 0.1 points",
                 _table(["mode", "gate", "target", "value", "verdict", "why"], gate_rows, numeric=(3,))),
        _section("Steps", steps),
        _section("Notes", _notes_list(doc.get("notes") or [])),
    ])
    return _page(title, body, with_plotly=False)


def _cell(value) -> str:
    return "" if value is None else str(value)


def _interval_cells(interval: list[float] | None) -> list[str]:
    return [str(interval[0]), str(interval[1])] if interval else ["", ""]


def _quality(quality: dict | None) -> str:
    if not quality:
        return MISSING
    said = format_correctness(quality["metric"], quality.get("value"), bool(quality.get("passed")))
    interval, paired = quality.get("ci95"), quality.get("against_none") or {}
    if interval:
        said += f" (95% over the held-out windows: {interval[0]:+.2%} to {interval[1]:+.2%})"
    if paired.get("ci95"):
        low, high = paired["ci95"]
        said += f"; against none, window by window: {paired['value']:+.2%} ({low:+.2%} to {high:+.2%})"
    return said

"""Plotly charts as plain dicts, rendered without plotly's Python graph objects: building those
costs about a second on first use (their validators and template are loaded), paid from a run's
budget after its answer is chosen. plotly.js draws the same figures from the dicts."""

from __future__ import annotations

from typing import Any

import plotly.io

Figure = dict[str, Any]

CONFIG = {"displaylogo": False, "responsive": True}
_AXIS = {"gridcolor": "#ebf0f8", "linecolor": "#ebf0f8", "zerolinecolor": "#ebf0f8", "zerolinewidth": 2, "automargin": True, "ticks": ""}
# the look of plotly's "plotly_white" template, written out: a named template is resolved in Python
_LOOK = {"font": {"color": "#2a3f5f"}, "paper_bgcolor": "white", "plot_bgcolor": "white", "hovermode": "closest"}


def bar(color: str | list[str], **fields: Any) -> dict[str, Any]:
    return {"type": "bar", "marker": {"color": color}, **fields}


def scatter(**fields: Any) -> dict[str, Any]:
    return {"type": "scatter", **fields}


def figure(traces: list[dict[str, Any]], layout: dict[str, Any], *, x_axis: dict[str, Any] | None = None,
           y_axis: dict[str, Any] | None = None) -> Figure:
    """A figure of `traces` with `layout` over our look; an axis's "title" may be given as plain text."""
    axes = {"xaxis": {**_AXIS, **_titled(x_axis or {})}, "yaxis": {**_AXIS, **_titled(y_axis or {})}}
    return {"data": traces, "layout": {**_LOOK, **axes, **layout}}


def _titled(axis: dict[str, Any]) -> dict[str, Any]:
    title = axis.get("title")
    return {**axis, "title": {"text": title}} if isinstance(title, str) else axis


def div(chart: Figure, div_id: str) -> str:
    """The chart's <div> and the script that draws it (plotly.js itself comes once, in the page's head)."""
    return plotly.io.to_html(chart, validate=False, full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG)

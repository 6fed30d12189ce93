"""Report files of `agnitra inspect`: inspect.json, ir.json and inspect.html.

inspect.json is `report.to_dict()` (schema agnitra.inspect/1, the IR embedded under "ir");
ir.json is the IR alone (schema agnitra.ir/1), readable with `GraphIR.from_dict`; inspect.html is
the self-contained page of `agnitra.report.inspect_html`. NaN and inf become null in both JSON
files, and numpy/torch scalars are written as plain numbers.
"""

from __future__ import annotations

from pathlib import Path

from agnitra.report.files import _prepare, _write_json, _write_text
from agnitra.report.inspect_html import inspect_html
from agnitra.results import InspectReport, to_dict

INSPECT_JSON_NAME = "inspect.json"
IR_JSON_NAME = "ir.json"
INSPECT_HTML_NAME = "inspect.html"


def write_inspect_report(report: InspectReport, out_dir: Path) -> dict[str, Path]:
    """Write the three files of an inspect run under `out_dir`; their paths by kind (json, ir, html)."""
    out_dir = _prepare(out_dir)
    return {
        # to_dict again: the IR part of report.to_dict() is dataclasses.asdict, which keeps NaN
        "json": _write_json(to_dict(report.to_dict()), out_dir / INSPECT_JSON_NAME),
        "ir": _write_json(to_dict(report.ir.to_dict()), out_dir / IR_JSON_NAME),
        "html": _write_text(inspect_html(report), out_dir / INSPECT_HTML_NAME),
    }

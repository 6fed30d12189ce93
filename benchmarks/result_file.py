"""A benchmark's result file: what every one under benchmarks/results/ starts with, then its own fields."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from agnitra.results import to_dict
from agnitra.telemetry.signature import software_versions


def write_result(path, schema: str, report, **fields) -> None:
    """Write `path` (rewritten whole: a run killed later keeps what it measured): the schema, today's date,
    the device report, the software versions and the command line, then `fields`."""
    doc = {"schema": schema, "date": dt.date.today().isoformat(), "device": to_dict(report), "versions": software_versions(),
           "command": " ".join(sys.argv), **fields}
    Path(path).write_text(json.dumps(doc, indent=2, default=str))


def fraction_of_copy(nbytes: float, ms: float, copy_gbps: float) -> float:
    """`nbytes` read in `ms` as a fraction of the copy bandwidth (GB/s) the kernel rows are judged by."""
    return nbytes / (ms / 1e3) / 1e9 / copy_gbps

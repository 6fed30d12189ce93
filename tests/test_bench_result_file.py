"""benchmarks/result_file.py: every benchmark's result file starts with the same record of where and how it ran."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import result_file  # noqa: E402 - benchmarks/ is not a package


@dataclass
class _Report:
    name: str
    ceilings: dict


def test_write_result_records_schema_date_device_versions_and_command_then_the_fields(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--runs", "3"])
    path = tmp_path / "out.json"
    result_file.write_result(path, "agnitra.x/1", _Report("H100", {"copy_gbps": 3000.0}), runs=3, rows=[{"ms": 0.5}])
    doc = json.loads(path.read_text())
    assert list(doc)[:5] == ["schema", "date", "device", "versions", "command"]
    assert doc["schema"] == "agnitra.x/1" and doc["command"] == "benchmarks/x.py --runs 3"
    assert doc["device"] == {"name": "H100", "ceilings": {"copy_gbps": 3000.0}} and "torch" in doc["versions"]
    assert doc["runs"] == 3 and doc["rows"] == [{"ms": 0.5}]
    result_file.write_result(path, "agnitra.x/1", _Report("H100", {}), rows=[])
    assert json.loads(path.read_text())["rows"] == [], "rewritten whole"

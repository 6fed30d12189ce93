"""Reports into the store: a bench or optimize report (as its JSON document, so a live report and
a report.json read back from a run folder take the same path) becomes one run row, its workload
and device rows (found or added), and one measurement row per variant and per searched candidate."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from agnitra.store.schema import DeviceRow, MeasurementRow, RunRow, WorkloadRow

BENCH_SCHEMA = "agnitra.bench/1"
OPTIMIZE_SCHEMA = "agnitra.optimize/1"


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


def record_report(session: Session, doc: dict, origin: str = "") -> RunRow | None:
    """Add the run a report document describes; None when this very report is stored already."""
    doc = _encodable(doc)
    schema = doc.get("schema")
    if schema not in (BENCH_SCHEMA, OPTIMIZE_SCHEMA):
        raise ValueError(f"not a bench or optimize report (schema {schema!r})")
    fingerprint = _hash(doc)
    if session.scalar(select(RunRow.id).where(RunRow.fingerprint == fingerprint)) is not None:
        return None
    bench = doc["bench"] if schema == OPTIMIZE_SCHEMA else doc
    run = RunRow(
        kind=_run_kind(doc), origin=origin, fingerprint=fingerprint,
        created_at=_parse_time(bench.get("created_at")), workload=_workload(session, bench.get("workload") or {}),
        device=_device(session, bench.get("device") or {}), conditions=bench.get("conditions") or {},
        versions=bench.get("versions") or {}, verdict=doc.get("verdict", "") if schema == OPTIMIZE_SCHEMA else "",
    )
    session.add(run)
    recipes = {c["name"]: c.get("recipe") for c in doc.get("candidates", [])} if schema == OPTIMIZE_SCHEMA else {}
    variants = bench.get("variants") or []
    baseline = _median(variants[0]) if variants else None
    for variant in variants:
        run.measurements.append(_measurement("final", variant, recipes.get(variant["name"]), baseline))
    for candidate in doc.get("candidates", []) if schema == OPTIMIZE_SCHEMA else []:
        run.measurements.append(_measurement("search", candidate, candidate.get("recipe"), candidate.get("baseline_ms")))
    session.flush()
    return run


def _run_kind(doc: dict) -> str:
    """bench, optimize, or collect (an optimize report of the collector's designed sample)."""
    if doc.get("schema") != OPTIMIZE_SCHEMA:
        return "bench"
    return "collect" if (doc.get("search") or {}).get("mode") == "collect" else "optimize"


def _workload(session: Session, w: dict) -> WorkloadRow:
    signature = w.get("signature") or {}
    static = dict(zip(signature.get("names", []), signature.get("values", [])))
    key = _hash([w.get("name"), w.get("source"), w.get("dtype"), signature.get("version"), static])
    row = session.scalar(select(WorkloadRow).where(WorkloadRow.key == key))
    if row is None:
        op_mix = {k: v for k, v in static.items() if k.startswith(("count_share.", "flops_share."))}
        row = WorkloadRow(key=key, name=w.get("name", ""), source=w.get("source", ""), task=w.get("task", ""), weights=w.get("weights", "given"),
                          dtype=w.get("dtype", ""), params=w.get("params"), signature_version=signature.get("version", ""), signature=static, op_mix=op_mix)
        session.add(row)
    return row


def _device(session: Session, d: dict) -> DeviceRow:
    signature = d.get("signature") or {}
    key = str(signature.get("id") or _hash([d.get("name"), d.get("kind"), signature]))
    row = session.scalar(select(DeviceRow).where(DeviceRow.key == key))
    if row is None:
        row = DeviceRow(key=key, name=d.get("name", ""), kind=d.get("kind", ""), signature=signature)
        session.add(row)
    return row


def _median(entry: dict) -> float | None:
    latency = entry.get("latency_ms") or {}
    return latency.get("median")


def _measurement(phase: str, entry: dict, recipe: dict | None, baseline_ms: float | None) -> MeasurementRow:
    latency = entry.get("latency_ms") or {}
    throughput = entry.get("throughput") or {}
    check = entry.get("correctness") or {}
    steps = (recipe or {}).get("steps")
    return MeasurementRow(
        phase=phase, variant=entry.get("name", ""), recipe=recipe, recipe_key=_hash(steps) if steps else "",
        status=entry.get("status", ""), reason=entry.get("reason", "") or "",
        median_ms=latency.get("median"), p95_ms=latency.get("p95"), baseline_ms=baseline_ms,
        throughput=throughput.get("value"), throughput_unit=throughput.get("unit", ""),
        model_bytes=entry.get("model_bytes"), peak_memory_bytes=entry.get("peak_memory_bytes"),
        energy_j_per_item=entry.get("energy_j_per_item"),
        quality_metric=check.get("metric", "") or "", quality_value=_finite(check.get("value")), passed=check.get("passed"),
        quality=_json_safe(check.get("details") or {}), setup_s=entry.get("setup_s"),
    )


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def _json_safe(value: Any) -> Any:
    """JSON columns take no NaN/Infinity on PostgreSQL: those become None; other objects their text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value if value is None or isinstance(value, (str, int, bool)) else str(value)


def _encodable(value: Any) -> Any:
    """Text a database can store: a path's undecodable bytes (surrogates, as os.fsdecode gives them
    on Linux) written as \\udcff instead of failing the insert."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encodable(v) for v in value]
    return value


def _parse_time(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None

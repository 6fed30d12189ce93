"""Run folders into the store, and the store out as one CSV (the dataset a cost model learns from)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select

from agnitra.errors import UserError
from agnitra.store.db import Store
from agnitra.store.record import record_report
from agnitra.store.schema import DeviceRow, MeasurementRow, RunRow, WorkloadRow, damaged

REPORT_FILES = ("report.json",)
CSV_COLUMNS = (
    "run_id", "run_kind", "created_at", "workload", "source", "task", "weights", "dtype", "params", "device", "device_kind",
    "phase", "variant", "recipe", "status", "reason", "median_ms", "p95_ms", "baseline_ms", "speedup", "throughput", "throughput_unit",
    "model_bytes", "peak_memory_bytes", "energy_j_per_item", "quality_metric", "quality_value", "passed", "torch",
)


@dataclass
class ImportResult:
    imported: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: why"


STORE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def import_runs(store: Store, paths: list[str | Path]) -> ImportResult:
    """Each run folder's report.json (or a report file itself) into the store; a report stored
    already is counted once; a folder without a readable report is skipped with the reason. A
    SQLite store file (*.db) brings all its runs (another machine's collection, merged)."""
    result = ImportResult()
    for path in map(Path, paths):
        if path.is_file() and path.suffix in STORE_SUFFIXES:
            _import_store_file(store, path, result)
            continue
        report = path / "report.json" if path.is_dir() else path
        if not report.is_file():
            result.skipped.append(f"{path}: no report.json (not a finished bench or optimize run)")
            continue
        try:
            doc = json.loads(report.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            result.skipped.append(f"{path}: report.json is not readable JSON ({type(exc).__name__})")
            continue
        try:
            with store.session() as session:
                run = record_report(session, doc, origin=str(path.resolve()))
        except ValueError as exc:
            result.skipped.append(f"{path}: {exc}")
            continue
        (result.imported if run is not None else result.already).append(str(path))
    return result


def _import_store_file(store: Store, path: Path, result: ImportResult) -> None:
    """Every run of another store (a SQLite file) copied in, with its workload, device and
    measurements; a run stored already (same report fingerprint) is counted once."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.orm import Session

    engine = create_engine(f"sqlite:///{path.resolve()}")
    try:
        if "runs" not in inspect(engine).get_table_names():
            result.skipped.append(f"{path}: not an Agnitra store (no runs table)")
            return
        with Session(engine) as source, store.session() as session:
            for run in source.scalars(select(RunRow).order_by(RunRow.id)):
                label = f"{path}#run{run.id}"
                if session.scalar(select(RunRow.id).where(RunRow.fingerprint == run.fingerprint)) is not None:
                    result.already.append(label)
                    continue
                copy = RunRow(kind=run.kind, origin=run.origin or label, fingerprint=run.fingerprint, created_at=run.created_at,
                              workload=_same_row(session, WorkloadRow, run.workload), device=_same_row(session, DeviceRow, run.device),
                              conditions=run.conditions, versions=run.versions, verdict=run.verdict)
                copy.measurements = [MeasurementRow(**{c.key: getattr(m, c.key) for c in MeasurementRow.__table__.columns if c.key not in ("id", "run_id")}) for m in run.measurements]
                session.add(copy)
                session.flush()
                result.imported.append(label)
    except Exception as exc:  # noqa: BLE001 - a damaged file is skipped with its reason
        result.skipped.append(f"{path}: not a readable store ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
    finally:
        engine.dispose()


def _same_row(session, table, row):
    """The destination's row of the same key (workloads and devices are keyed), or a copy."""
    found = session.scalar(select(table).where(table.key == row.key))
    if found is None:
        found = table(**{c.key: getattr(row, c.key) for c in table.__table__.columns if c.key != "id"})
        session.add(found)
        session.flush()
    return found


def _open_for_writing(path: str | Path):
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("w", newline="")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}; choose another --csv path") from exc


def export_csv(store: Store, path: str | Path, skipped: list[str] | None = None) -> int:
    """Every measurement, one row each with its workload, device and run; returns the row count.
    A damaged row (a JSON cell that does not parse) is left out and described in `skipped`."""
    skipped = [] if skipped is None else skipped
    handle = _open_for_writing(path)
    rows = 0
    with handle, store.session() as session:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        query = (select(MeasurementRow, RunRow, WorkloadRow, DeviceRow).join(RunRow, MeasurementRow.run_id == RunRow.id)
                 .join(WorkloadRow, RunRow.workload_id == WorkloadRow.id).join(DeviceRow, RunRow.device_id == DeviceRow.id)
                 .order_by(RunRow.id, MeasurementRow.id))
        for m, run, w, d in session.execute(query):
            if _skip_damaged(m, run, w, d, skipped):
                continue
            speedup = m.baseline_ms / m.median_ms if m.baseline_ms and m.median_ms else None
            writer.writerow([run.id, run.kind, run.created_at.isoformat() if run.created_at else "", w.name, w.source, w.task, w.weights, w.dtype, w.params,
                             d.name, d.kind, m.phase, m.variant, json.dumps(m.recipe["steps"]) if m.recipe else "", m.status, m.reason,
                             m.median_ms, m.p95_ms, m.baseline_ms, speedup, m.throughput, m.throughput_unit, m.model_bytes, m.peak_memory_bytes,
                             m.energy_j_per_item, m.quality_metric, m.quality_value, m.passed, (run.versions or {}).get("torch", "")])
            rows += 1
    return rows


def counts(store: Store) -> dict[str, int]:
    with store.session() as session:
        return {table.__tablename__: session.scalar(select(func.count()).select_from(table)) for table in (WorkloadRow, DeviceRow, RunRow, MeasurementRow)}


DATASET_COLUMNS = (
    "run_id", "run_kind", "workload", "source", "family", "task", "weights", "dtype", "params", "batch", "device", "device_kind",
    "phase", "variant", "recipe", "status", "reason", "median_ms", "baseline_ms", "speedup", "model_bytes", "baseline_model_bytes",
    "peak_memory_bytes", "quality_metric", "quality_value", "quality_error", "passed", "setup_s", "torch",
)
SIGNATURE_PREFIX = "sig."
DEVICE_PREFIX = "dev."
HOTSPOT_PREFIX = "hot."  # the run's hotspot features (measured before its search), apart from the static signature


def family_of(name: str, source: str) -> str:
    """The group a workload is held out with: a generated model's family (`gen:mlp`), else its name."""
    if source.startswith("gen:"):
        return source.split("-", 1)[0]
    return name


def _skip_damaged(m: MeasurementRow, run: RunRow, w: WorkloadRow, d: DeviceRow, skipped: list[str]) -> bool:
    text = damaged(m.recipe, m.quality, run.conditions, run.versions, w.signature, w.op_mix, d.signature)
    if text:
        skipped.append(f"measurement {m.id} of run {run.id}: a JSON cell does not parse ({text[:60]!r})")
    return bool(text)


def dataset_rows(store: Store, device_kind: str | None = None, skipped: list[str] | None = None) -> list[dict]:
    """Every measurement of a recipe (candidates and recipe variants; not the baselines or peers
    that are no recipe), with its workload's static signature (`sig.*`), its run's hotspot
    features (`hot.*`, where the run timed them), its device's numeric signature (`dev.*`) and the targets: speedup over its run's baseline, the model's own memory
    against the baseline's, the quality error (`results.quality_error`) and whether it passed."""
    from agnitra.results import quality_error

    skipped = [] if skipped is None else skipped
    rows: list[dict] = []
    with store.session() as session:
        query = (select(MeasurementRow, RunRow, WorkloadRow, DeviceRow).join(RunRow, MeasurementRow.run_id == RunRow.id)
                 .join(WorkloadRow, RunRow.workload_id == WorkloadRow.id).join(DeviceRow, RunRow.device_id == DeviceRow.id)
                 .order_by(RunRow.id, MeasurementRow.id))
        if device_kind:
            query = query.where(DeviceRow.kind == device_kind)
        baseline_bytes: dict[int, int | None] = {}
        for m, run, w, d in session.execute(query):
            if _skip_damaged(m, run, w, d, skipped):
                continue
            if m.phase == "final" and m.variant == "eager":
                baseline_bytes[run.id] = m.model_bytes
            if not (m.recipe or {}).get("steps"):
                continue
            row = {
                "run_id": run.id, "run_kind": run.kind, "workload": w.name, "source": w.source, "family": family_of(w.name, w.source), "task": w.task,
                "weights": w.weights, "dtype": w.dtype, "params": w.params, "batch": (run.conditions or {}).get("batch"), "device": d.name, "device_kind": d.kind,
                "phase": m.phase, "variant": m.variant, "recipe": json.dumps(m.recipe["steps"], sort_keys=True), "status": m.status, "reason": m.reason,
                "median_ms": m.median_ms, "baseline_ms": m.baseline_ms, "speedup": m.baseline_ms / m.median_ms if m.baseline_ms and m.median_ms else None,
                "model_bytes": m.model_bytes, "baseline_model_bytes": baseline_bytes.get(run.id), "peak_memory_bytes": m.peak_memory_bytes,
                "quality_metric": m.quality_metric, "quality_value": m.quality_value,
                "quality_error": quality_error(m.quality_metric, m.quality_value) if m.quality_value is not None else None,
                "passed": m.passed, "setup_s": m.setup_s, "torch": (run.versions or {}).get("torch", ""),
            }
            row.update({SIGNATURE_PREFIX + k: v for k, v in (w.signature or {}).items()})
            row.update({HOTSPOT_PREFIX + k: v for k, v in ((run.conditions or {}).get("hotspots") or {}).items() if isinstance(v, (int, float))})
            row.update({DEVICE_PREFIX + k: v for k, v in (d.signature or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
            rows.append(row)
    for row in rows:  # the baseline's bytes are known once its run is read
        row["baseline_model_bytes"] = row["baseline_model_bytes"] or baseline_bytes.get(row["run_id"])
    return rows


def export_dataset(store: Store, path: str | Path, device_kind: str | None = None, skipped: list[str] | None = None) -> int:
    """`dataset_rows` as one CSV (the columns: DATASET_COLUMNS, then every signature and device
    feature seen); returns the row count; damaged rows are described in `skipped`."""
    rows = dataset_rows(store, device_kind, skipped)
    extra = list(dict.fromkeys(k for row in rows for k in row if k not in DATASET_COLUMNS))
    with _open_for_writing(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=[*DATASET_COLUMNS, *extra], restval="")
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)

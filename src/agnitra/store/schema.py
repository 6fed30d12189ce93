"""The store's tables (SQLAlchemy 2): every measurement Agnitra makes, with what it was made on.

workloads: what was measured (name, source, task, weights trained/random/given, dtype, parameter
count, the static signature vector and op mix), one row per distinct signature and source;
devices: the device signature; runs: one bench or optimize run (or an imported run folder) with
its conditions and versions; measurements: one variant or candidate of a run: its recipe, status
and reason, latency, throughput, memory, energy and quality figures. Schema changes are Alembic
revisions under store/migrations.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, ForeignKey, Integer, String, Text, TypeDecorator, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Damaged(dict):
    """A JSON cell that does not parse (a row damaged outside Agnitra): read as empty, with its
    text kept, so readers skip that row and say so instead of failing on the whole store."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class SafeJSON(TypeDecorator):
    """JSON whose unreadable cells come back as `Damaged` (SQLite stores JSON as text; PostgreSQL
    refuses invalid JSON on write). The column's type in the database is plain JSON."""

    impl = JSON
    cache_ok = True

    def result_processor(self, dialect, coltype):
        inner = self.impl_instance.result_processor(dialect, coltype)

        def process(value):
            try:
                return inner(value) if inner is not None else value
            except ValueError:  # json.JSONDecodeError
                return Damaged(str(value)[:120])

        return process


def damaged(*values: Any) -> str:
    """The text of the first damaged cell among `values`, else ''."""
    for value in values:
        if isinstance(value, Damaged):
            return value.text
    return ""


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: SafeJSON, list[Any]: SafeJSON}


class WorkloadRow(Base):
    __tablename__ = "workloads"
    __table_args__ = (UniqueConstraint("key", name="uq_workloads_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64))  # hash of name, source, dtype and signature
    name: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(500), default="")
    task: Mapped[str] = mapped_column(String(40), default="")
    weights: Mapped[str] = mapped_column(String(20), default="given")  # trained | random | given
    dtype: Mapped[str] = mapped_column(String(40), default="")
    params: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    signature_version: Mapped[str] = mapped_column(String(40), default="")
    signature: Mapped[dict[str, Any]] = mapped_column(default=dict)  # names -> values (static part)
    op_mix: Mapped[dict[str, Any]] = mapped_column(default=dict)  # count and FLOP shares per op kind


class DeviceRow(Base):
    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("key", name="uq_devices_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))
    signature: Mapped[dict[str, Any]] = mapped_column(default=dict)


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # bench | optimize
    origin: Mapped[str] = mapped_column(String(1000), default="")  # the run folder it was imported from, if any
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)  # the report's hash: an import is never counted twice
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    conditions: Mapped[dict[str, Any]] = mapped_column(default=dict)
    versions: Mapped[dict[str, Any]] = mapped_column(default=dict)
    verdict: Mapped[str] = mapped_column(Text, default="")

    workload: Mapped[WorkloadRow] = relationship()
    device: Mapped[DeviceRow] = relationship()
    measurements: Mapped[list["MeasurementRow"]] = relationship(back_populates="run", cascade="all, delete-orphan")


class MeasurementRow(Base):
    __tablename__ = "measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    phase: Mapped[str] = mapped_column(String(20))  # search (a candidate's short run) | final (the interleaved run)
    variant: Mapped[str] = mapped_column(Text)
    recipe: Mapped[dict[str, Any] | None] = mapped_column(SafeJSON, nullable=True)  # steps and parameters; None for peers
    recipe_key: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text, default="")
    median_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    p95_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    baseline_ms: Mapped[float | None] = mapped_column(Float, nullable=True)  # the baseline of the same run
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput_unit: Mapped[str] = mapped_column(String(40), default="")
    model_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    energy_j_per_item: Mapped[float | None] = mapped_column(Float, nullable=True)
    quality_metric: Mapped[str] = mapped_column(String(40), default="")
    quality_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    passed: Mapped[bool | None] = mapped_column(nullable=True)
    quality: Mapped[dict[str, Any]] = mapped_column(default=dict)  # every figure of the check (SQNR, KL, perplexity, ...)
    setup_s: Mapped[float | None] = mapped_column(Float, nullable=True)

    run: Mapped[RunRow] = relationship(back_populates="measurements")

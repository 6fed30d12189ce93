"""The service's tables, in the store beside the measurements (one database, one Alembic history).

organisations: groups of projects; projects: a team's unit of access, in an organisation or
none; api_keys: hashed keys with a role (viewer, editor, admin), for one project, one
organisation's projects or all; models: an imported model (a zoo reference or an uploaded file kept under
the service's data folder) with its IR summary; jobs: the queue (status, settings, the lease of the
worker running it, attempts, the idempotency key, the result once); job_events: progress lines;
audit_logs: every change, who made it; datasets: uploaded check inputs; targets: named devices with
their defaults.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from agnitra.store.schema import Base


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class OrganisationRow(Base):
    __tablename__ = "organisations"
    __table_args__ = (UniqueConstraint("name", name="uq_organisations_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ProjectRow(Base):
    __tablename__ = "projects"
    __table_args__ = (UniqueConstraint("name", name="uq_projects_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    organisation_id: Mapped[int | None] = mapped_column(ForeignKey("organisations.id"), nullable=True)  # None: in no organisation
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ApiKeyRow(Base):
    __tablename__ = "api_keys"
    __table_args__ = (UniqueConstraint("digest", name="uq_api_keys_digest"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(16))  # the key's first characters, to tell keys apart
    digest: Mapped[str] = mapped_column(String(64))  # sha256 of the key; the key itself is never stored
    role: Mapped[str] = mapped_column(String(20))  # viewer | editor | admin
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id"), nullable=True)  # None: every project (of its organisation)
    organisation_id: Mapped[int | None] = mapped_column(ForeignKey("organisations.id"), nullable=True)  # None: every organisation
    revoked: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ModelRow(Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))  # zoo | onnx | pt2 | torchscript
    spec: Mapped[str] = mapped_column(String(1000))  # what api.prepare_workload loads: zoo:NAME or the stored file
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)  # batch, seq_len, dtype, ...
    size_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    sha256: Mapped[str] = mapped_column(String(64), default="")
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)  # IR summary and signature
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("project_id", "idempotency_key", name="uq_jobs_idempotency"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    kind: Mapped[str] = mapped_column(String(20))  # schedule (the optimize search)
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)  # budget, tolerances, strategy, ...
    status: Mapped[str] = mapped_column(String(20), default="queued")  # queued | running | done | failed | cancelled
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str] = mapped_column(String(100), default="")
    lease_until: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    progress: Mapped[float] = mapped_column(default=0.0)
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)  # the optimize report document, written once
    error: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class JobEventRow(Base):
    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    message: Mapped[str] = mapped_column(Text)
    fraction: Mapped[float | None] = mapped_column(nullable=True)


class AuditLogRow(Base):
    __tablename__ = "audit_logs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"), nullable=True)  # None: an OIDC token, or the server's own CLI
    actor: Mapped[str] = mapped_column(String(300), default="")  # who acted: key:ID or oidc:SUBJECT
    action: Mapped[str] = mapped_column(String(100))  # e.g. project.create, job.submit
    target: Mapped[str] = mapped_column(String(200), default="")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class DatasetRow(Base):
    """An uploaded file of check inputs (`.pt` or `.npz`), read as tensors at upload; a job naming
    it passes it to `api.optimize` as `check_inputs`."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    name: Mapped[str] = mapped_column(String(200))
    filename: Mapped[str] = mapped_column(String(300), default="")  # as uploaded: errors name it, never the server's path
    path: Mapped[str] = mapped_column(String(1000))  # the stored file under the service's data folder
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    sha256: Mapped[str] = mapped_column(String(64), default="")
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)  # rows, and each tensor's shape and dtype
    created_by: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class TargetRow(Base):
    """A named deployment target of a project: the device, and optionally the dtype, batch and
    sequence length a job naming it runs with (settings the job gives itself win)."""

    __tablename__ = "targets"
    __table_args__ = (UniqueConstraint("project_id", "name", name="uq_targets_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    name: Mapped[str] = mapped_column(String(100))
    device: Mapped[str] = mapped_column(String(20))  # cpu | cuda | cuda:N
    dtype: Mapped[str | None] = mapped_column(String(20), nullable=True)
    batch: Mapped[int | None] = mapped_column(Integer, nullable=True)
    seq_len: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)

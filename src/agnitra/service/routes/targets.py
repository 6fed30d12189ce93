"""Targets: a project's named deployment targets (a device, and optionally the dtype, batch and
sequence length), made by its editors and admins. A job naming one (`target`) takes these as
settings; what the job sets itself wins. The device is checked when the job runs, by `api` as the
CLI's `--device`: a worker without it fails the job with the reason, never runs it elsewhere."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field
from sqlalchemy import select

from agnitra.service import queue
from agnitra.service.access import Caller, Route, audit, caller, in_scope, need
from agnitra.service.views import BODY, CALLER, MAX_OFFSET, errors, iso, page, project_named
from agnitra.store.service_schema import TargetRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))

DTYPES = ("float32", "fp32", "float16", "fp16", "bfloat16", "bf16")


class TargetIn(BaseModel):
    project: str
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    device: str = Field(pattern=r"^(cpu|cuda|cuda:\d{1,2})$")
    dtype: str | None = None
    batch: int | None = Field(default=None, ge=1, le=1 << 16)
    seq_len: int | None = Field(default=None, ge=1, le=1 << 20)


def target_view(row: TargetRow) -> dict:
    return {"id": row.id, "project_id": row.project_id, "name": row.name, "device": row.device, "dtype": row.dtype, "batch": row.batch,
            "seq_len": row.seq_len, "created_at": iso(row.created_at)}


def target_settings(row: TargetRow) -> dict:
    """What a job naming the target runs with, unless it sets them itself."""
    return {name: value for name, value in (("device", row.device), ("dtype", row.dtype), ("batch", row.batch), ("seq_len", row.seq_len)) if value is not None}


@router.post("/v1/targets", status_code=201, responses=errors(*BODY, 404, 409))
def create_target(body: TargetIn, who: Caller = Depends(caller)) -> dict:
    project = project_named(who.session, body.project)
    need(who, "editor", project.id)
    if body.dtype is not None and body.dtype.lower() not in DTYPES:
        raise HTTPException(422, f"unknown dtype '{body.dtype}'; use one of: {', '.join(DTYPES)}")
    if who.session.scalar(select(TargetRow).where(TargetRow.project_id == project.id, TargetRow.name == body.name)):
        raise HTTPException(409, f"project '{project.name}' has a target named '{body.name}'; choose another name")
    row = TargetRow(project_id=project.id, name=body.name, device=body.device, dtype=body.dtype.lower() if body.dtype else None, batch=body.batch,
                    seq_len=body.seq_len, created_by=who.key.id, created_at=queue.now())
    who.session.add(row)
    who.session.flush()
    audit(who, "target.create", f"target:{row.id}", name=row.name, **target_settings(row))
    return target_view(row)


@router.get("/v1/targets", responses=errors(404))
def list_targets(who: Caller = Depends(caller), project: str | None = None, limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> dict:
    """The targets the key may see, newest first: of one project (by name) or of every project in its scope."""
    need(who, "viewer")
    total, rows = page(who.session, TargetRow, lambda column: in_scope(who, column), project, limit, offset)
    return {"total": total, "limit": limit, "offset": offset, "targets": [target_view(r) for r in rows]}


def find_target(who: Caller, project_id: int, name: str) -> TargetRow:
    row = who.session.scalar(select(TargetRow).where(TargetRow.project_id == project_id, TargetRow.name == name))
    if row is None:
        raise HTTPException(422, f"the job's project has no target named '{name}'; make it first (POST /v1/targets) or list them (GET /v1/targets)")
    return row

"""The audit log: every change, newest first; admins only."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from agnitra.service.access import Caller, caller, need
from agnitra.service.views import CALLER, MAX_OFFSET, errors, iso
from agnitra.store.service_schema import AuditLogRow

router = APIRouter(responses=errors(*CALLER))


@router.get("/v1/audit/logs")
def audit_logs(who: Caller = Depends(caller), limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> list[dict]:
    need(who, "admin")
    rows = who.session.scalars(select(AuditLogRow).order_by(AuditLogRow.id.desc()).limit(limit).offset(offset)).all()
    return [{"id": r.id, "at": iso(r.at), "key": r.key_id, "actor": r.actor, "action": r.action, "target": r.target, "detail": r.detail} for r in rows]

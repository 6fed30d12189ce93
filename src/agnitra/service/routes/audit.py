"""The audit log: every change, newest first; admins only (an organisation's or a project's admin
sees what its scope's keys did)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from agnitra.service.access import Caller, Route, caller, in_scope, need
from agnitra.service.views import CALLER, MAX_OFFSET, errors, iso
from agnitra.store.service_schema import ApiKeyRow, AuditLogRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))


@router.get("/v1/audit/logs")
def audit_logs(who: Caller = Depends(caller), limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> list[dict]:
    need(who, "admin")
    query = select(AuditLogRow)
    if (condition := in_scope(who, ApiKeyRow.project_id)) is not None:  # a scoped admin: what its scope's keys did
        scoped_keys = select(ApiKeyRow.id).where(condition | (ApiKeyRow.organisation_id == who.principal.organisation_id)
                                                 if who.principal.organisation_id is not None else condition)
        query = query.where(AuditLogRow.key_id.in_(scoped_keys))
    rows = who.session.scalars(query.order_by(AuditLogRow.id.desc()).limit(limit).offset(offset)).all()
    return [{"id": r.id, "at": iso(r.at), "key": r.key_id, "actor": r.actor, "action": r.action, "target": r.target, "detail": r.detail} for r in rows]

"""Who is calling and what they may do: the request's database session, its API key (`caller`),
the role check (`need`) and the audit entry every change writes (`audit`).

A key comes as `Authorization: Bearer KEY` or `X-API-Key: KEY`; roles are viewer < editor < admin,
for every project or one (`keys.allows`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.orm import Session

from agnitra.service import keys, queue
from agnitra.store.service_schema import ApiKeyRow, AuditLogRow


@dataclass
class Caller:
    key: ApiKeyRow
    session: Session


def session(request: Request) -> Iterator[Session]:
    """The request's transaction: committed when the endpoint returns, rolled back when it raises."""
    with request.app.state.store.session() as s:
        yield s


def caller(s: Session = Depends(session), authorization: str | None = Header(default=None), x_api_key: str | None = Header(default=None)) -> Caller:
    token = x_api_key or (authorization[7:] if authorization and authorization.lower().startswith("bearer ") else None)
    row = keys.find_key(s, token) if token else None
    if row is None:
        raise HTTPException(401, "an API key is needed: Authorization: Bearer KEY (agnitra keys create makes one)")
    return Caller(row, s)


def need(who: Caller, role: str, project_id: int | None = None) -> None:
    if not keys.allows(who.key, role, project_id):
        scope = "" if who.key.project_id is None else f" of project {who.key.project_id}"
        raise HTTPException(403, f"this key ({who.key.role}{scope}) may not do this: it needs {role}")


def audit(who: Caller, action: str, target: str, **detail) -> None:
    who.session.add(AuditLogRow(key_id=who.key.id, action=action, target=target, detail=detail, at=queue.now()))

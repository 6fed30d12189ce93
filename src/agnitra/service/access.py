"""Who is calling and what they may do: the request's database session, its caller (`caller`: an
API key, or an OIDC token where the server trusts an issuer), the rate limit per caller, the role
check (`need`) and the audit entry every change writes (`audit`).

A request takes one worker thread: the session and the caller are async dependencies (a key is
checked against `keys.KeyCache`; only a key not read lately, or a token, takes a thread), and a
sync route commits its session in its own thread (`Route`). Each hop between the event loop and a
worker thread cost about 0.5 ms of CPU on the 2-core VM, and there were four a request.

A key comes as `Authorization: Bearer KEY` or `X-API-Key: KEY`; a token as `Authorization: Bearer
JWT`. Roles are viewer < editor < admin, for every project, one organisation's projects or one
project (`keys.allows`): a key's from its row, a token's from its claims (`oidc`); `in_scope` keeps a
list to the caller's projects."""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from fastapi import Depends, Header, HTTPException, Request
from fastapi.routing import APIRoute
from sqlalchemy import insert, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from agnitra.service import keys, queue
from agnitra.service.oidc import IssuerUnavailable, OidcVerifier, TokenRefused, looks_like_jwt
from agnitra.store.service_schema import AuditLogRow, OrganisationRow, ProjectRow

NEEDS_KEY = "an API key is needed: Authorization: Bearer KEY (agnitra keys create makes one)"


@dataclass(frozen=True)
class TokenIdentity:
    """A caller by OIDC token: its subject and the role and project its claims grant; `id` is None
    (no key row), so it reads like a key wherever a route asks for .id, .role or .project_id."""

    subject: str
    role: str
    project_id: int | None
    organisation_id: int | None = None
    id: None = None


@dataclass
class Caller:
    principal: keys.KeyGrant | TokenIdentity
    session: Session

    @property
    def key(self) -> keys.KeyGrant | TokenIdentity:
        """The principal under the name the routes use: .id (the key's, None for a token), .role, .project_id."""
        return self.principal

    @property
    def actor(self) -> str:
        """Who acted, as the audit log records it: key:ID or oidc:SUBJECT."""
        p = self.principal
        return f"oidc:{p.subject}" if isinstance(p, TokenIdentity) else f"key:{p.id}"


async def session(request: Request) -> AsyncIterator[Session]:
    """The request's transaction: committed when the endpoint returns, rolled back when it raises.
    Making a session does no I/O, so it needs no thread; a sync route commits in its own (`Route`),
    and what is still open here (an async route's work) is ended in one."""
    s = request.app.state.store.sessions()
    try:
        yield s
    except BaseException:
        if s.in_transaction():
            await run_in_threadpool(s.rollback)
        raise
    else:
        if s.in_transaction():
            await run_in_threadpool(s.commit)
    finally:
        s.close()


# before the response is sent: FastAPI's default (since 0.121, when `scope` came) ends a yield
# dependency after it, which let a client answered 201 ask for the row before it was committed
SESSION = Depends(session, scope="function") if "scope" in inspect.signature(Depends).parameters else Depends(session)


async def caller(request: Request, s: Session = SESSION, authorization: str | None = Header(default=None),
                 x_api_key: str | None = Header(default=None)) -> Caller:
    bearer = authorization[7:].strip() if authorization and authorization.lower().startswith("bearer ") else None
    verifier: OidcVerifier | None = request.app.state.oidc
    if x_api_key is None and bearer and looks_like_jwt(bearer):
        if verifier is None:
            raise HTTPException(401, "this server takes API keys, not OIDC tokens (it was started without --oidc-issuer); " + NEEDS_KEY)
        who = Caller(await run_in_threadpool(_token_identity, s, verifier, bearer), s)
    else:
        key, known = x_api_key or bearer, request.app.state.keys
        grant = (known.cached(key) or await run_in_threadpool(known.read, s, key)) if key else None
        if grant is None:
            also = f", or an OIDC token from {verifier.settings.issuer}" if verifier else ""
            raise HTTPException(401, NEEDS_KEY + also)
        who = Caller(grant, s)
    limiter = request.app.state.limiter
    wait = limiter.take(who.actor) if limiter else 0.0
    if wait:
        raise HTTPException(429, f"over the rate limit of {limiter.per_minute} requests a minute for this caller; retry in {math.ceil(wait)} s",
                            headers={"Retry-After": str(math.ceil(wait))})
    return who


def _token_identity(s: Session, verifier: OidcVerifier, token: str) -> TokenIdentity:
    try:
        claims = verifier.claims(token)
    except TokenRefused as exc:
        raise HTTPException(401, str(exc), headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}) from exc
    except IssuerUnavailable as exc:
        raise HTTPException(503, f"tokens cannot be checked now: {exc}; retry later or use an API key") from exc
    settings = verifier.settings
    granted = claims.get(settings.role_claim)
    roles = [r for r in (granted if isinstance(granted, list) else [granted]) if r in keys.ROLES]
    if not roles:
        raise HTTPException(403, f"the token grants no role here: its '{settings.role_claim}' claim is {granted!r}; the issuer must set it to one of {', '.join(keys.ROLES)}")
    project_id = None
    if (name := claims.get(settings.project_claim)) is not None:
        project_id = s.scalar(select(ProjectRow.id).where(ProjectRow.name == str(name)))
        if project_id is None:
            raise HTTPException(403, f"the token's '{settings.project_claim}' claim names project '{name}', which does not exist; create it (POST /v1/projects) or fix the claim")
    organisation_id = None
    if project_id is None and (name := claims.get(settings.organisation_claim)) is not None:
        organisation_id = s.scalar(select(OrganisationRow.id).where(OrganisationRow.name == str(name)))
        if organisation_id is None:
            raise HTTPException(403, f"the token's '{settings.organisation_claim}' claim names organisation '{name}', which does not exist; "
                                     "create it (POST /v1/organisations) or fix the claim")
    return TokenIdentity(subject=str(claims["sub"]), role=max(roles, key=keys.ROLES.index), project_id=project_id, organisation_id=organisation_id)


def need(who: Caller, role: str, project_id: int | None = None) -> None:
    p = who.principal
    organisation_id = None
    if project_id is not None and p.project_id is None and p.organisation_id is not None:  # only an organisation's grant asks where the project is
        organisation_id = who.session.scalar(select(ProjectRow.organisation_id).where(ProjectRow.id == project_id))
    if not keys.allows(p, role, project_id, organisation_id):
        kind = "token" if isinstance(p, TokenIdentity) else "key"
        raise HTTPException(403, f"this {kind} ({p.role}{keys.scope_of(p)}) may not do this: it needs {role}")


def need_unscoped(who: Caller, role: str, what: str) -> None:
    """`role` over every project (of the caller's organisation where `what` allows one)."""
    need(who, role)
    p = who.principal
    if p.project_id is not None:
        kind = "token" if isinstance(p, TokenIdentity) else "key"
        raise HTTPException(403, f"this {kind} covers project {p.project_id} only; {what} needs one for every project")


def in_scope(who: Caller, project_column):
    """The SQL condition on a project id column that keeps the caller's projects (None: all)."""
    p = who.principal
    if p.project_id is not None:
        return project_column == p.project_id
    if p.organisation_id is not None:
        return project_column.in_(select(ProjectRow.id).where(ProjectRow.organisation_id == p.organisation_id))
    return None


def audit(who: Caller, action: str, target: str, **detail) -> None:
    who.session.execute(_NEW_AUDIT, {"key_id": who.principal.id, "actor": who.actor, "action": action, "target": target, "detail": detail, "at": queue.now()})


_NEW_AUDIT = insert(AuditLogRow.__table__)  # written at once, a statement built once: no ORM flush at the commit


class Route(APIRoute):
    """A route whose sync endpoint commits the request's session in the worker thread it ran in
    (before the response is sent, as before): the request's one thread hop (see the module's note)."""

    def __init__(self, path: str, endpoint: Callable, **kwargs) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = _committing(endpoint)
        super().__init__(path, endpoint, **kwargs)


def _committing(endpoint: Callable) -> Callable:
    @functools.wraps(endpoint)
    def run(*args, **kwargs):
        result = endpoint(*args, **kwargs)
        for value in kwargs.values():
            s = value.session if isinstance(value, Caller) else value
            if isinstance(s, Session) and s.in_transaction():
                s.commit()
        return result

    run.__signature__ = inspect.signature(endpoint, eval_str=True)  # the route module's names resolved: FastAPI reads the wrapper's globals otherwise
    return run

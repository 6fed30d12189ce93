"""API keys: shown once when made, stored as a SHA-256 digest (a random 256-bit key needs no slow
hash), each with a role for one project, for one organisation's projects, or for all; roles
nest: viewer < editor < admin. The server checks a request's key against `KeyCache`: the store is
read for a key at most every KEY_TTL_S seconds."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from agnitra.errors import UserError
from agnitra.store.service_schema import ApiKeyRow, OrganisationRow, ProjectRow

ROLES = ("viewer", "editor", "admin")
PREFIX = "agn_"
KEY_TTL_S = 5.0  # a live key's row is read again this long after it was read: a key revoked in the store stops working within it


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(session: Session, name: str, role: str, project: str | None = None, organisation: str | None = None) -> tuple[ApiKeyRow, str]:
    """A new key (the row, and the key itself: the only time it is seen)."""
    if role not in ROLES:
        raise UserError(f"unknown role '{role}'; use one of: {', '.join(ROLES)}")
    if project is not None and organisation is not None:
        raise UserError("a key covers one project or one organisation's projects: give --project or --organisation, not both")
    organisation_id = None
    if organisation is not None:
        organisation_id = session.scalar(select(OrganisationRow.id).where(OrganisationRow.name == organisation))
        if organisation_id is None:
            raise UserError(f"no organisation named '{organisation}'; create it first (POST /v1/organisations)")
    project_id = None
    if project is not None:
        row = session.scalar(select(ProjectRow).where(ProjectRow.name == project))
        if row is None:
            raise UserError(f"no project named '{project}'; create it first (POST /v1/projects) or leave --project out for a key to every project")
        project_id = row.id
    key = PREFIX + secrets.token_urlsafe(32)
    row = ApiKeyRow(name=name, prefix=key[:10], digest=digest(key), role=role, project_id=project_id, organisation_id=organisation_id)
    session.add(row)
    session.flush()
    return row, key


def find_key(session: Session, key: str) -> ApiKeyRow | None:
    """The live key row of `key`, or None (unknown or revoked)."""
    row = session.scalar(select(ApiKeyRow).where(ApiKeyRow.digest == digest(key)))
    return row if row is not None and not row.revoked else None


@dataclass(frozen=True)
class KeyGrant:
    """What a live key's row grants, as read from the store: no session, so it outlives the request that read it."""

    id: int
    role: str
    project_id: int | None
    organisation_id: int | None


class KeyCache:
    """The live keys the server has read, by digest, each read again KEY_TTL_S after: most requests
    check their key without a query (or a worker thread to make one). Unknown and revoked keys are
    never remembered, so a new key works at once."""

    def __init__(self, ttl: float = KEY_TTL_S, clock=time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self.known: dict[str, tuple[KeyGrant, float]] = {}  # digest -> (grant, read again after); one entry a live key

    def cached(self, key: str) -> KeyGrant | None:
        """The key's grant if it was read less than `ttl` ago; None: read it (`read`)."""
        grant, fresh_until = self.known.get(digest(key), (None, 0.0))
        return grant if fresh_until > self.clock() else None

    def read(self, session: Session, key: str) -> KeyGrant | None:
        """The key's grant read from the store now (None: unknown or revoked), remembered for `ttl`."""
        row = find_key(session, key)
        if row is None:
            self.known.pop(digest(key), None)
            return None
        grant = KeyGrant(row.id, row.role, row.project_id, row.organisation_id)
        self.known[row.digest] = (grant, self.clock() + self.ttl)
        return grant


class Grant(Protocol):
    """What a caller holds: a key's row, or an OIDC token's identity (`access.TokenIdentity`)."""

    role: str
    project_id: int | None
    organisation_id: int | None


def allows(row: Grant, role: str, project_id: int | None = None, organisation_id: int | None = None) -> bool:
    """Whether the key (or token) holds at least `role` on `project_id`, a project of
    `organisation_id` (None: in none); a project id None is an action on no one project."""
    if ROLES.index(row.role) < ROLES.index(role):
        return False
    if project_id is None:
        return True
    if row.project_id is not None:
        return row.project_id == project_id
    return row.organisation_id is None or row.organisation_id == organisation_id


def scope_of(row: Grant) -> str:
    """The key's reach as said in a refusal: '', ' of project N' or ' of organisation N'."""
    if row.project_id is not None:
        return f" of project {row.project_id}"
    return f" of organisation {row.organisation_id}" if row.organisation_id is not None else ""

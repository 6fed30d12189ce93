"""API keys: shown once when made, stored as a SHA-256 digest (a random 256-bit key needs no slow
hash), each with a role for one project, for one organisation's projects, or for all; roles
nest: viewer < editor < admin."""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from agnitra.errors import UserError
from agnitra.store.service_schema import ApiKeyRow, OrganisationRow, ProjectRow

ROLES = ("viewer", "editor", "admin")
PREFIX = "agn_"


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

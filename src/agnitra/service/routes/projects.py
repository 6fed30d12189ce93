"""Organisations and projects: instance admins make organisations, admins of every project (or of
an organisation's) make projects, anyone with a key sees those its key covers."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy import select

from agnitra.service import queue
from agnitra.service.access import Caller, Route, audit, caller, in_scope, need, need_unscoped
from agnitra.service.views import BODY, CALLER, errors, iso, project_view
from agnitra.store.service_schema import OrganisationRow, ProjectRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))
NAME = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class OrganisationIn(BaseModel):
    name: str = NAME


class ProjectIn(BaseModel):
    name: str = NAME
    organisation: str | None = Field(default=None, min_length=1, max_length=200)  # by name; an organisation's key puts it in its own


def organisation_view(row: OrganisationRow) -> dict:
    return {"id": row.id, "name": row.name, "created_at": iso(row.created_at)}


@router.post("/v1/organisations", status_code=201, responses=errors(*BODY, 409))
def create_organisation(body: OrganisationIn, who: Caller = Depends(caller)) -> dict:
    need_unscoped(who, "admin", "making an organisation")
    if who.principal.organisation_id is not None:
        raise HTTPException(403, f"this key covers organisation {who.principal.organisation_id} only; making an organisation needs one for every project")
    if who.session.scalar(select(OrganisationRow).where(OrganisationRow.name == body.name)):
        raise HTTPException(409, f"an organisation named '{body.name}' exists")
    row = OrganisationRow(name=body.name, created_at=queue.now())
    who.session.add(row)
    who.session.flush()
    audit(who, "organisation.create", f"organisation:{row.id}", name=body.name)
    return organisation_view(row)


@router.get("/v1/organisations")
def list_organisations(who: Caller = Depends(caller)) -> list[dict]:
    need(who, "viewer")
    query = select(OrganisationRow).order_by(OrganisationRow.id)
    p = who.principal
    if p.organisation_id is not None:
        query = query.where(OrganisationRow.id == p.organisation_id)
    elif p.project_id is not None:
        query = query.where(OrganisationRow.id == select(ProjectRow.organisation_id).where(ProjectRow.id == p.project_id).scalar_subquery())
    return [organisation_view(r) for r in who.session.scalars(query)]


@router.post("/v1/projects", status_code=201, responses=errors(*BODY, 404, 409))
def create_project(body: ProjectIn, who: Caller = Depends(caller)) -> dict:
    need_unscoped(who, "admin", "making a project")
    organisation_id = who.principal.organisation_id
    if body.organisation is not None:
        named = who.session.scalar(select(OrganisationRow.id).where(OrganisationRow.name == body.organisation))
        if named is None:
            raise HTTPException(404, f"no organisation named '{body.organisation}'")
        if organisation_id is not None and named != organisation_id:
            raise HTTPException(403, f"this key covers organisation {organisation_id} only; it cannot make a project in '{body.organisation}'")
        organisation_id = named
    if who.session.scalar(select(ProjectRow).where(ProjectRow.name == body.name)):
        raise HTTPException(409, f"a project named '{body.name}' exists")
    row = ProjectRow(name=body.name, organisation_id=organisation_id, created_at=queue.now())
    who.session.add(row)
    who.session.flush()
    audit(who, "project.create", f"project:{row.id}", name=body.name, organisation_id=organisation_id)
    return project_view(row)


@router.get("/v1/projects")
def list_projects(who: Caller = Depends(caller)) -> list[dict]:
    need(who, "viewer")
    query = select(ProjectRow).order_by(ProjectRow.id)
    if (condition := in_scope(who, ProjectRow.id)) is not None:
        query = query.where(condition)
    return [project_view(r) for r in who.session.scalars(query)]

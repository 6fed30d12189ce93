"""Projects: admins make them, anyone with a key sees those its key covers."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy import select

from agnitra.service import keys, queue
from agnitra.service.access import Caller, audit, caller, need
from agnitra.service.views import BODY, CALLER, errors, project_view
from agnitra.store.service_schema import ProjectRow

router = APIRouter(responses=errors(*CALLER))


class ProjectIn(BaseModel):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@router.post("/v1/projects", status_code=201, responses=errors(*BODY, 409))
def create_project(body: ProjectIn, who: Caller = Depends(caller)) -> dict:
    need(who, "admin")
    if who.session.scalar(select(ProjectRow).where(ProjectRow.name == body.name)):
        raise HTTPException(409, f"a project named '{body.name}' exists")
    row = ProjectRow(name=body.name, created_at=queue.now())
    who.session.add(row)
    who.session.flush()
    audit(who, "project.create", f"project:{row.id}", name=body.name)
    return project_view(row)


@router.get("/v1/projects")
def list_projects(who: Caller = Depends(caller)) -> list[dict]:
    need(who, "viewer")
    rows = who.session.scalars(select(ProjectRow).order_by(ProjectRow.id)).all()
    return [project_view(r) for r in rows if keys.allows(who.key, "viewer", r.id)]

"""Health and Prometheus metrics: no key needed."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agnitra.service.access import SESSION, Route
from agnitra.store.service_schema import JobRow

router = APIRouter(route_class=Route)


@router.get("/v1/health")
def health(request: Request, s: Session = SESSION) -> dict:
    s.execute(select(1))
    return {"status": "ok", "store": request.app.state.store.revision()}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(s: Session = SESSION) -> str:
    lines = ["# HELP agnitra_jobs Jobs in the queue by status", "# TYPE agnitra_jobs gauge"]
    for status, count in s.execute(select(JobRow.status, func.count()).group_by(JobRow.status)):
        lines.append(f'agnitra_jobs{{status="{status}"}} {count}')
    return "\n".join(lines) + "\n"

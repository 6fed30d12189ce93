"""Rows as the API shows them, the lookups every route shares (a missing row is a 404), and the
error answers the OpenAPI document lists (`errors`)."""

from __future__ import annotations

from fastapi import HTTPException
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agnitra.service import queue
from agnitra.store.service_schema import JobEventRow, JobRow, ModelRow, ProjectRow


class Problem(BaseModel):
    detail: str  # one line: what is wrong and what to do


PROBLEMS = {400: "the body cannot be parsed (not UTF-8, not JSON, a broken multipart form)",
            401: "no API key or token, or one the server does not take",
            403: "the caller's role or project does not allow this",
            404: "what the request names does not exist",
            409: "it conflicts with what is there: a name taken, a job not (or already) finished",
            413: "the request is over the server's size limit",
            429: "over the caller's rate limit; Retry-After says when to retry",
            503: "the OIDC issuer cannot be read to check a token; retry later or use an API key"}
CALLER = (401, 403, 429, 503)  # what `access.caller` and `access.need` answer: every route that takes a key
BODY = (400, 413)  # what a route with a request body answers besides


def errors(*codes: int) -> dict[int | str, dict]:
    """The OpenAPI document's entries for these error answers, each {"detail": "..."}."""
    return {code: {"model": Problem, "description": PROBLEMS[code]} for code in codes}


MAX_ID = (1 << 31) - 1  # ids are 32-bit in PostgreSQL: a larger one names no row (and overflows the query)
MAX_OFFSET = MAX_ID  # a page's offset: past every row there can be


def get_row(s: Session, table, row_id: int, what: str):
    row = s.get(table, row_id) if 0 < row_id <= MAX_ID else None
    if row is None:
        raise HTTPException(404, f"no {what} {row_id}")
    return row


def project_of(s: Session, table, row_id: int, what: str) -> int:
    """The project of a row, its one column read (a model's IR summary is not); a missing row is a 404."""
    project_id = s.scalar(select(table.project_id).where(table.id == row_id)) if 0 < row_id <= MAX_ID else None
    if project_id is None:
        raise HTTPException(404, f"no {what} {row_id}")
    return project_id


def project_named(s: Session, name: str) -> ProjectRow:
    row = s.scalar(select(ProjectRow).where(ProjectRow.name == name))
    if row is None:
        raise HTTPException(404, f"no project named '{name}'")
    return row


def iso(moment) -> str | None:
    return queue._aware(moment).isoformat() if moment is not None else None


def project_view(row: ProjectRow) -> dict:
    return {"id": row.id, "name": row.name, "organisation_id": row.organisation_id, "created_at": iso(row.created_at)}


def model_view(row: ModelRow) -> dict:
    return {"id": row.id, "project_id": row.project_id, "name": row.name, "kind": row.kind, "options": row.options, "size_bytes": row.size_bytes,
            "sha256": row.sha256, "summary": row.summary, "created_at": iso(row.created_at)}


def job_view(s: Session, job: JobRow, events: bool) -> dict:
    doc = {"id": job.id, "project_id": job.project_id, "model_id": job.model_id, "type": job.kind, "settings": job.settings, "status": job.status,
           "progress": job.progress, "attempts": job.attempts, "error": job.error, "idempotency_key": job.idempotency_key,
           "created_at": iso(job.created_at), "started_at": iso(job.started_at), "finished_at": iso(job.finished_at)}
    if job.result:
        doc["outcome"] = {"verdict": job.result.get("verdict"), "speedup": job.result.get("speedup"), "chosen": job.result.get("chosen"),
                          "recipe": job.result.get("recipe"), "candidates": len(job.result.get("candidates") or [])}
    if events:
        rows = s.scalars(select(JobEventRow).where(JobEventRow.job_id == job.id).order_by(JobEventRow.id)).all()
        doc["events"] = [{"at": iso(e.at), "message": e.message, "fraction": e.fraction} for e in rows]
    return doc


def pareto_rows(job: JobRow) -> list[dict]:
    """A finished job's measured candidates as points (latency, memory, error), flagged on the front."""
    front = set(job.result.get("pareto") or [])
    rows = []
    for i, c in enumerate(job.result.get("candidates") or []):
        if c.get("status") != "ok":
            continue
        latency = (c.get("latency_ms") or {}).get("median") if isinstance(c.get("latency_ms"), dict) else c.get("latency_ms")
        error = (c.get("correctness") or {}).get("value")
        rows.append({"candidate": f"{job.id}-{i}", "name": c.get("name"), "latency_ms": latency, "memory_bytes": c.get("model_bytes") or c.get("peak_memory_bytes"),
                     "error": error, "on_front": c.get("name") in front})
    return rows


def page(s: Session, table, scope_of, project: str | None, limit: int, offset: int) -> tuple[int, list]:
    """A page of a project-owned table, newest first: of one project (by name) or of every project
    the caller covers (`scope_of`: the project column -> the condition keeping them, None for all:
    `access.in_scope`); with the total."""
    scope = [table.project_id == project_named(s, project).id] if project else []
    condition = scope_of(table.project_id)
    if condition is not None:
        scope.append(condition)
    total = s.scalar(select(func.count(table.id)).where(*scope))
    return total, list(s.scalars(select(table).where(*scope).order_by(table.id.desc()).limit(limit).offset(offset)))

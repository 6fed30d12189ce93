"""Jobs: submitted (idempotent by `Idempotency-Key`), listed, followed, cancelled; their candidates
and Pareto fronts. Jobs run in workers, never in the server."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field
from sqlalchemy import func, select

from agnitra.service import queue
from agnitra.service.access import Caller, Route, audit, caller, in_scope, need
from agnitra.service.routes.targets import DTYPES, find_target, target_settings
from agnitra.service.views import BODY, CALLER, MAX_OFFSET, errors, get_row, job_view, pareto_rows, project_named, project_of
from agnitra.store.service_schema import DatasetRow, JobRow, ModelRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))

JOB_KINDS = {"schedule": None, "quant": ["int8-weight-only", "int4-weight-only", "dynamic-int8", "fp8", "mixed-precision", "onnxruntime"]}
LATER_KINDS = {"layout": "layout re-permutation is not in the core yet (issue 54)", "nas": "architecture search is not in the core"}
SETTINGS = {"budget", "strategy", "transforms", "exclude_transforms", "candidate_timeout", "peers", "objective", "device", "max_error", "min_cosine",
            "min_top1", "min_sqnr_db", "min_token_agreement", "max_ppl_increase", "min_retrieval", "dtype", "batch", "seq_len"}


class Constraints(BaseModel):
    quality_drop: float | None = Field(default=None, gt=0)  # the relative error allowed (max_error)
    latency_p95_ms: float | None = Field(default=None, gt=0)
    memory_mb: float | None = Field(default=None, gt=0)


class JobIn(BaseModel):
    model_id: int
    type: str = "schedule"
    settings: dict[str, Any] = Field(default_factory=dict)
    constraints: Constraints = Field(default_factory=Constraints)
    target: str | None = None  # a target of the model's project: its device, dtype, batch and seq_len (the job's own settings win)
    dataset_id: int | None = None  # a dataset of the model's project: the check inputs every candidate is verified on


@router.post("/v1/jobs/optimize", status_code=201, responses={**errors(*BODY, 404), 200: {"description": "the job submitted before under this Idempotency-Key"}})
def submit_job(body: JobIn, response: Response, who: Caller = Depends(caller), idempotency_key: str | None = Header(default=None, max_length=200)) -> dict:
    project_id = project_of(who.session, ModelRow, body.model_id, "model")
    need(who, "editor", project_id)
    settings = job_settings(body)
    settings = {**_references(who, body, project_id), **settings}
    job, new = queue.submit(who.session, project_id, body.model_id, body.type, settings, idempotency_key, who.key.id)
    if new:
        audit(who, "job.submit", f"job:{job.id}", type=body.type, settings=settings)
    else:
        response.status_code = 200
    return job_view(who.session, job, events=False)


@router.get("/v1/jobs/{job_id}", responses=errors(404))
def get_job(job_id: int, who: Caller = Depends(caller)) -> dict:
    job = get_row(who.session, JobRow, job_id, "job")
    need(who, "viewer", job.project_id)
    return job_view(who.session, job, events=True)


@router.get("/v1/jobs", responses=errors(404))
def list_jobs(who: Caller = Depends(caller), project: str | None = None, status: str | None = None,
              limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> dict:
    need(who, "viewer")
    query = select(JobRow)
    if project:
        query = query.where(JobRow.project_id == project_named(who.session, project).id)
    if (condition := in_scope(who, JobRow.project_id)) is not None:
        query = query.where(condition)
    if status:
        query = query.where(JobRow.status == status)
    total = who.session.scalar(select(func.count()).select_from(query.subquery()))
    rows = who.session.scalars(query.order_by(JobRow.id.desc()).limit(limit).offset(offset)).all()
    return {"total": total, "limit": limit, "offset": offset, "jobs": [job_view(who.session, j, events=False) for j in rows]}


@router.post("/v1/jobs/{job_id}/cancel", responses=errors(404, 409))
def cancel_job(job_id: int, who: Caller = Depends(caller)) -> dict:
    job = get_row(who.session, JobRow, job_id, "job")
    need(who, "editor", job.project_id)
    if job.status in queue.FINISHED:
        raise HTTPException(409, f"job {job_id} has finished ({job.status})")
    queue.cancel(who.session, job)
    audit(who, "job.cancel", f"job:{job_id}")
    return job_view(who.session, job, events=False)


@router.get("/v1/candidates/{candidate_id}", responses=errors(404))
def get_candidate(candidate_id: str = Path(pattern=r"^[0-9]+-[0-9]+$", description="JOB-N: the job's N-th candidate"), who: Caller = Depends(caller)) -> dict:
    match = re.fullmatch(r"(\d+)-(\d+)", candidate_id)
    if not match:
        raise HTTPException(404, "a candidate id is JOB-N (the job's N-th candidate)")
    job = get_row(who.session, JobRow, int(match[1]), "job")
    need(who, "viewer", job.project_id)
    candidates = job.result.get("candidates") or []
    if int(match[2]) >= len(candidates):
        raise HTTPException(404, f"job {job.id} has {len(candidates)} candidates")
    return {"id": candidate_id, "job": job.id, **candidates[int(match[2])]}


@router.get("/v1/pareto/{job_id}", responses={**errors(404), 200: {"description": "the points (format=csv: as CSV)", "content": {"text/csv": {}}}})
def pareto(job_id: int, who: Caller = Depends(caller), format: str = Query("json", pattern="^(json|csv)$")) -> Any:
    job = get_row(who.session, JobRow, job_id, "job")
    need(who, "viewer", job.project_id)
    rows = pareto_rows(job)
    if format == "csv":
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=["candidate", "name", "latency_ms", "memory_bytes", "error", "on_front"])
        writer.writeheader()
        writer.writerows(rows)
        return PlainTextResponse(text.getvalue(), media_type="text/csv")
    return {"job": job.id, "points": rows}


def job_settings(body: JobIn) -> dict[str, Any]:
    if body.type in LATER_KINDS:
        raise HTTPException(422, f"job type '{body.type}' is not supported: {LATER_KINDS[body.type]}")
    if body.type not in JOB_KINDS:
        raise HTTPException(422, f"unknown job type '{body.type}'; known: {', '.join([*JOB_KINDS, *LATER_KINDS])}")
    unknown = sorted(set(body.settings) - SETTINGS)
    if unknown:
        raise HTTPException(422, f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(SETTINGS))}")
    for name in ("latency_p95_ms", "memory_mb"):
        if getattr(body.constraints, name) is not None:
            raise HTTPException(422, f"constraint {name} is not supported yet: the search ranks by its objective and keeps every answer within the quality tolerance; drop it")
    settings = dict(body.settings)
    if body.constraints.quality_drop is not None:
        settings["max_error"] = body.constraints.quality_drop
    if JOB_KINDS[body.type] and "transforms" not in settings:
        settings["transforms"] = JOB_KINDS[body.type]
    _check_settings(settings)
    return settings


def _references(who: Caller, body: JobIn, project_id: int) -> dict[str, Any]:
    """The target's settings and the dataset named, each of the job's own project."""
    found: dict[str, Any] = {}
    if body.target is not None:
        found.update(target_settings(find_target(who, project_id, body.target)), target=body.target)
    if body.dataset_id is not None:
        dataset = get_row(who.session, DatasetRow, body.dataset_id, "dataset")
        if dataset.project_id != project_id:
            raise HTTPException(422, f"dataset {dataset.id} belongs to another project than model {body.model_id}; upload it to the model's project")
        found["dataset_id"] = dataset.id
    return found


def _check_settings(settings: dict[str, Any]) -> None:
    """The settings as `api.optimize` would check them, before the job is queued."""
    from agnitra import arguments

    if "budget" in settings:
        arguments.duration("budget", settings["budget"])
    if "candidate_timeout" in settings:
        arguments.duration("candidate_timeout", settings["candidate_timeout"])
    for name in ("max_error", "min_cosine", "min_top1", "min_sqnr_db", "min_token_agreement", "min_retrieval"):
        if name in settings:
            arguments.positive(name, settings[name])
    for name in ("batch", "seq_len"):
        arguments.count(name, settings.get(name))
    dtype = settings.get("dtype")
    arguments.one_of("dtype", dtype.lower() if isinstance(dtype, str) else dtype, DTYPES, "dtype")

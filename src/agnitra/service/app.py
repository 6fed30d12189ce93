"""The REST API (`/v1`, OpenAPI at `/v1/openapi.json`) over the same `api` and store as the CLI.

Every endpoint but `/v1/health` and `/metrics` takes an API key (`Authorization: Bearer KEY` or
`X-API-Key`) and checks its role on the project concerned: viewer reads, editor imports models and
submits jobs, admin makes projects and keys and reads the audit log. Every change writes an audit
entry. Jobs run in workers (`agnitra worker`, or `serve --workers N`), never in the server.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agnitra.errors import UserError, first_line
from agnitra.service import keys, queue
from agnitra.store import open_store
from agnitra.store.service_schema import ApiKeyRow, AuditLogRow, JobEventRow, JobRow, ModelRow, ProjectRow

JOB_KINDS = {"schedule": None, "quant": ["int8-weight-only", "int4-weight-only", "dynamic-int8", "fp8", "mixed-precision", "onnxruntime"]}
LATER_KINDS = {"layout": "layout re-permutation is not in the core yet (issue 54)", "nas": "architecture search is not in the core"}
SETTINGS = {"budget", "strategy", "transforms", "exclude_transforms", "candidate_timeout", "peers", "objective", "device", "max_error", "min_cosine",
            "min_top1", "min_sqnr_db", "min_token_agreement", "max_ppl_increase", "min_retrieval"}
MODEL_OPTIONS = {"batch", "seq_len", "tokens", "dtype", "size", "input_shapes", "task"}
UPLOAD_SUFFIXES = {".onnx": "onnx", ".pt2": "pt2", ".pt": "torchscript", ".pth": "torchscript", ".torchscript": "torchscript"}
MAX_JSON_BYTES = 1 << 20
CONNECTIONS = 48  # the store's pool: one a request thread (the threadpool holds 40)


@dataclass
class ServiceConfig:
    db_url: str
    data_dir: Path
    max_upload_bytes: int = 2 << 30
    allow_pickle: bool = False  # pickled uploads run code when loaded: refused unless the server opted in
    cors_origins: list[str] = field(default_factory=list)


class ProjectIn(BaseModel):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ZooImport(BaseModel):
    project: str
    name: str = Field(min_length=1, max_length=200)
    zoo: str = Field(min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    options: dict[str, Any] = Field(default_factory=dict)


class Constraints(BaseModel):
    quality_drop: float | None = Field(default=None, gt=0)  # the relative error allowed (max_error)
    latency_p95_ms: float | None = Field(default=None, gt=0)
    memory_mb: float | None = Field(default=None, gt=0)


class JobIn(BaseModel):
    model_id: int
    type: str = "schedule"
    settings: dict[str, Any] = Field(default_factory=dict)
    constraints: Constraints = Field(default_factory=Constraints)


@dataclass
class Caller:
    key: ApiKeyRow
    session: Session


def create_app(config: ServiceConfig) -> FastAPI:
    store = open_store(config.db_url, connections=CONNECTIONS)
    app = FastAPI(title="Agnitra", version="1", openapi_url="/v1/openapi.json", docs_url="/v1/docs", redoc_url=None)
    app.state.store, app.state.config = store, config
    _middleware(app, config)

    def session():
        with store.session() as s:
            yield s

    def caller(s: Session = Depends(session), authorization: str | None = Header(default=None), x_api_key: str | None = Header(default=None)) -> Caller:
        token = x_api_key or (authorization[7:] if authorization and authorization.lower().startswith("bearer ") else None)
        row = keys.find_key(s, token) if token else None
        if row is None:
            raise HTTPException(401, "an API key is needed: Authorization: Bearer KEY (agnitra keys create makes one)")
        return Caller(row, s)

    def need(who: Caller, role: str, project_id: int | None = None) -> None:
        if not keys.allows(who.key, role, project_id):
            raise HTTPException(403, f"this key ({who.key.role}{'' if who.key.project_id is None else ' of project ' + str(who.key.project_id)}) may not do this: it needs {role}")

    def audit(who: Caller, action: str, target: str, **detail) -> None:
        who.session.add(AuditLogRow(key_id=who.key.id, action=action, target=target, detail=detail, at=queue.now()))

    @app.get("/v1/health")
    def health(s: Session = Depends(session)) -> dict:
        s.execute(select(1))
        return {"status": "ok", "store": store.revision()}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics(s: Session = Depends(session)) -> str:
        lines = ["# HELP agnitra_jobs Jobs in the queue by status", "# TYPE agnitra_jobs gauge"]
        for status, count in s.execute(select(JobRow.status, func.count()).group_by(JobRow.status)):
            lines.append(f'agnitra_jobs{{status="{status}"}} {count}')
        return "\n".join(lines) + "\n"

    @app.post("/v1/projects", status_code=201)
    def create_project(body: ProjectIn, who: Caller = Depends(caller)) -> dict:
        need(who, "admin")
        if who.session.scalar(select(ProjectRow).where(ProjectRow.name == body.name)):
            raise HTTPException(409, f"a project named '{body.name}' exists")
        row = ProjectRow(name=body.name, created_at=queue.now())
        who.session.add(row)
        who.session.flush()
        audit(who, "project.create", f"project:{row.id}", name=body.name)
        return _project(row)

    @app.get("/v1/projects")
    def list_projects(who: Caller = Depends(caller)) -> list[dict]:
        need(who, "viewer")
        rows = who.session.scalars(select(ProjectRow).order_by(ProjectRow.id)).all()
        return [_project(r) for r in rows if keys.allows(who.key, "viewer", r.id)]

    @app.post("/v1/models/import", status_code=201)
    async def import_model(request: Request, who: Caller = Depends(caller)) -> dict:
        if request.headers.get("content-type", "").startswith("multipart/"):
            return await _import_upload(request, who)
        body = ZooImport.model_validate(await _json(request))
        project = _project_named(who.session, body.project)
        need(who, "editor", project.id)
        options = _model_options(body.options)
        row = _register_model(who.session, project, body.name, "zoo", f"zoo:{body.zoo}", options, None, "")
        audit(who, "model.import", f"model:{row.id}", zoo=body.zoo, options=options)
        return _model(row)

    async def _import_upload(request: Request, who: Caller) -> dict:
        form = await request.form(max_part_size=config.max_upload_bytes)
        upload, project_name, name = form.get("file"), form.get("project"), form.get("name")
        if not isinstance(upload, UploadFile) or not project_name or not name:
            raise HTTPException(422, "a model upload is multipart with fields file, project and name (options: a JSON object)")
        project = _project_named(who.session, str(project_name))
        need(who, "editor", project.id)
        suffix = Path(upload.filename or "").suffix.lower()
        if suffix not in UPLOAD_SUFFIXES:
            raise HTTPException(422, f"an upload is one of {', '.join(sorted(UPLOAD_SUFFIXES))}; got '{upload.filename}'")
        options = _model_options(json.loads(str(form.get("options") or "{}")))
        folder = config.data_dir / "models"
        folder.mkdir(parents=True, exist_ok=True)
        digest, size, path = hashlib.sha256(), 0, folder / f"upload-{queue.now().strftime('%Y%m%d%H%M%S%f')}{suffix}"
        with path.open("wb") as out:
            while chunk := await upload.read(1 << 20):
                size += len(chunk)
                if size > config.max_upload_bytes:
                    out.close()
                    path.unlink()
                    raise HTTPException(413, f"the upload is over the server's limit of {config.max_upload_bytes} bytes")
                digest.update(chunk)
                out.write(chunk)
        final = folder / f"{digest.hexdigest()[:16]}{suffix}"
        path.replace(final)
        try:
            row = _register_model(who.session, project, str(name), UPLOAD_SUFFIXES[suffix], str(final), options, size, digest.hexdigest(), upload.filename or "")
        except HTTPException:
            final.unlink(missing_ok=True)
            raise
        audit(who, "model.import", f"model:{row.id}", file=upload.filename, bytes=size)
        return _model(row)

    def _register_model(s: Session, project: ProjectRow, name: str, kind: str, spec: str, options: dict, size: int | None, sha: str, shown: str = "") -> ModelRow:
        summary = _summary(spec, options, config.allow_pickle, shown)
        row = ModelRow(project_id=project.id, name=name, kind=kind, spec=spec, options=options, size_bytes=size, sha256=sha, summary=summary, created_at=queue.now())
        s.add(row)
        s.flush()
        return row

    @app.get("/v1/models/{model_id}")
    def get_model(model_id: int, who: Caller = Depends(caller)) -> dict:
        row = _get(who.session, ModelRow, model_id, "model")
        need(who, "viewer", row.project_id)
        return _model(row)

    @app.post("/v1/jobs/optimize", status_code=201)
    def submit_job(body: JobIn, response: Response, who: Caller = Depends(caller), idempotency_key: str | None = Header(default=None)) -> dict:
        model = _get(who.session, ModelRow, body.model_id, "model")
        need(who, "editor", model.project_id)
        settings = _job_settings(body)
        job, new = queue.submit(who.session, model.project_id, model.id, body.type, settings, idempotency_key, who.key.id)
        if new:
            audit(who, "job.submit", f"job:{job.id}", type=body.type, settings=settings)
        else:
            response.status_code = 200
        return _job(who.session, job, events=False)

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: int, who: Caller = Depends(caller)) -> dict:
        job = _get(who.session, JobRow, job_id, "job")
        need(who, "viewer", job.project_id)
        return _job(who.session, job, events=True)

    @app.get("/v1/jobs")
    def list_jobs(who: Caller = Depends(caller), project: str | None = None, status: str | None = None,
                  limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0)) -> dict:
        need(who, "viewer")
        query = select(JobRow)
        if project:
            query = query.where(JobRow.project_id == _project_named(who.session, project).id)
        if who.key.project_id is not None:
            query = query.where(JobRow.project_id == who.key.project_id)
        if status:
            query = query.where(JobRow.status == status)
        total = who.session.scalar(select(func.count()).select_from(query.subquery()))
        rows = who.session.scalars(query.order_by(JobRow.id.desc()).limit(limit).offset(offset)).all()
        return {"total": total, "limit": limit, "offset": offset, "jobs": [_job(who.session, j, events=False) for j in rows]}

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel_job(job_id: int, who: Caller = Depends(caller)) -> dict:
        job = _get(who.session, JobRow, job_id, "job")
        need(who, "editor", job.project_id)
        if job.status in queue.FINISHED:
            raise HTTPException(409, f"job {job_id} has finished ({job.status})")
        queue.cancel(who.session, job)
        audit(who, "job.cancel", f"job:{job_id}")
        return _job(who.session, job, events=False)

    @app.get("/v1/candidates/{candidate_id}")
    def get_candidate(candidate_id: str, who: Caller = Depends(caller)) -> dict:
        match = re.fullmatch(r"(\d+)-(\d+)", candidate_id)
        if not match:
            raise HTTPException(404, "a candidate id is JOB-N (the job's N-th candidate)")
        job = _get(who.session, JobRow, int(match[1]), "job")
        need(who, "viewer", job.project_id)
        candidates = job.result.get("candidates") or []
        if int(match[2]) >= len(candidates):
            raise HTTPException(404, f"job {job.id} has {len(candidates)} candidates")
        return {"id": candidate_id, "job": job.id, **candidates[int(match[2])]}

    @app.get("/v1/pareto/{job_id}")
    def pareto(job_id: int, who: Caller = Depends(caller), format: str = Query("json", pattern="^(json|csv)$")) -> Any:
        job = _get(who.session, JobRow, job_id, "job")
        need(who, "viewer", job.project_id)
        rows = _pareto_rows(job)
        if format == "csv":
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=["candidate", "name", "latency_ms", "memory_bytes", "error", "on_front"])
            writer.writeheader()
            writer.writerows(rows)
            return PlainTextResponse(text.getvalue(), media_type="text/csv")
        return {"job": job.id, "points": rows}

    @app.get("/v1/audit/logs")
    def audit_logs(who: Caller = Depends(caller), limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0)) -> list[dict]:
        need(who, "admin")
        rows = who.session.scalars(select(AuditLogRow).order_by(AuditLogRow.id.desc()).limit(limit).offset(offset)).all()
        return [{"id": r.id, "at": _iso(r.at), "key": r.key_id, "action": r.action, "target": r.target, "detail": r.detail} for r in rows]

    return app


def _middleware(app: FastAPI, config: ServiceConfig) -> None:
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=config.cors_origins, allow_methods=["GET", "POST"], allow_headers=["Authorization", "X-API-Key", "Content-Type", "Idempotency-Key"])

    app.add_middleware(_LimitsAndHeaders, max_upload_bytes=config.max_upload_bytes)

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError):
        return JSONResponse({"detail": str(exc)}, status_code=422)


SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
                    (b"content-security-policy", b"default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'")]


class _LimitsAndHeaders:
    """Plain ASGI (no per-request task, unlike an http middleware): a body over the size limit is
    refused from its Content-Length, and every response carries the security headers."""

    def __init__(self, app, max_upload_bytes: int) -> None:
        self.app, self.max_upload_bytes = app, max_upload_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = int(headers.get(b"content-length", b"0") or 0)
        limit = self.max_upload_bytes + (1 << 20) if headers.get(b"content-type", b"").startswith(b"multipart/") else MAX_JSON_BYTES
        if length > limit:
            return await JSONResponse({"detail": "the request is over the server's size limit"}, status_code=413)(scope, receive, send)

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise HTTPException(422, f"the body is not JSON ({first_line(exc)})") from exc


def _get(s: Session, table, row_id: int, what: str):
    row = s.get(table, row_id)
    if row is None:
        raise HTTPException(404, f"no {what} {row_id}")
    return row


def _project_named(s: Session, name: str) -> ProjectRow:
    row = s.scalar(select(ProjectRow).where(ProjectRow.name == name))
    if row is None:
        raise HTTPException(404, f"no project named '{name}'")
    return row


def _model_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - MODEL_OPTIONS)
    if unknown:
        raise HTTPException(422, f"unknown model option(s) {', '.join(unknown)}; known: {', '.join(sorted(MODEL_OPTIONS))}")
    return options


def _job_settings(body: JobIn) -> dict[str, Any]:
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


def _summary(spec: str, options: dict[str, Any], allow_pickle: bool, shown: str = "") -> dict[str, Any]:
    """The model's IR summary and signature (untimed), or why it cannot be loaded (a 422 naming the
    upload by its own file name, never the server's path)."""
    from agnitra import api

    try:
        report = api.inspect(spec, device="cpu", timed=False, allow_pickle=allow_pickle, **options)
    except UserError as exc:
        raise HTTPException(422, str(exc).replace(spec, shown or spec)) from exc
    ir = report.ir
    return {"nodes": len(ir.nodes), "params": ir.params, "op_mix": ir.op_mix(), "source": ir.source, "graph_breaks": len(ir.graph_breaks),
            "signature": report.signature, "workload": report.workload}


def _pareto_rows(job: JobRow) -> list[dict]:
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


def _iso(moment) -> str | None:
    return queue._aware(moment).isoformat() if moment is not None else None


def _project(row: ProjectRow) -> dict:
    return {"id": row.id, "name": row.name, "created_at": _iso(row.created_at)}


def _model(row: ModelRow) -> dict:
    return {"id": row.id, "project_id": row.project_id, "name": row.name, "kind": row.kind, "options": row.options, "size_bytes": row.size_bytes,
            "sha256": row.sha256, "summary": row.summary, "created_at": _iso(row.created_at)}


def _job(s: Session, job: JobRow, events: bool) -> dict:
    doc = {"id": job.id, "project_id": job.project_id, "model_id": job.model_id, "type": job.kind, "settings": job.settings, "status": job.status,
           "progress": job.progress, "attempts": job.attempts, "error": job.error, "idempotency_key": job.idempotency_key,
           "created_at": _iso(job.created_at), "started_at": _iso(job.started_at), "finished_at": _iso(job.finished_at)}
    if job.result:
        doc["outcome"] = {"verdict": job.result.get("verdict"), "speedup": job.result.get("speedup"), "chosen": job.result.get("chosen"),
                          "recipe": job.result.get("recipe"), "candidates": len(job.result.get("candidates") or [])}
    if events:
        rows = s.scalars(select(JobEventRow).where(JobEventRow.job_id == job.id).order_by(JobEventRow.id)).all()
        doc["events"] = [{"at": _iso(e.at), "message": e.message, "fraction": e.fraction} for e in rows]
    return doc

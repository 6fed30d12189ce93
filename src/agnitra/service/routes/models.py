"""Models: imported from the zoo by reference or uploaded (.onnx, .pt2, TorchScript), each with its
IR summary and signature; uploads are size-limited and pickled files refused unless the server
opted in."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from agnitra.errors import UserError, first_line
from agnitra.service import queue
from agnitra.service.access import Caller, Route, audit, caller, in_scope, need
from agnitra.service.views import BODY, CALLER, MAX_OFFSET, errors, get_row, model_view, page, project_named
from agnitra.store.service_schema import DatasetRow, ModelRow, ProjectRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))

MODEL_OPTIONS = {"batch", "seq_len", "tokens", "dtype", "size", "input_shapes", "task"}
UPLOAD_SUFFIXES = {".onnx": "onnx", ".pt2": "pt2", ".pt": "torchscript", ".pth": "torchscript", ".torchscript": "torchscript"}


class ZooImport(BaseModel):
    project: str
    name: str = Field(min_length=1, max_length=200)
    zoo: str = Field(min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    options: dict[str, Any] = Field(default_factory=dict)


def upload_form(**fields: dict) -> dict:
    """The OpenAPI schema of an upload's multipart form (the route reads the form itself): a file,
    its project and name, and these fields."""
    return {"type": "object", "required": ["file", "project", "name"],
            "properties": {"file": {"type": "string", "format": "binary"}, "project": {"type": "string"}, "name": {"type": "string", "minLength": 1, "maxLength": 200}, **fields}}


IMPORT = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": ZooImport.model_json_schema()},
    "multipart/form-data": {"schema": upload_form(options={"type": "string", "description": "a JSON object of model options"})}}}}


@router.post("/v1/models/import", status_code=201, responses=errors(*BODY, 404), openapi_extra=IMPORT)
async def import_model(request: Request, who: Caller = Depends(caller)) -> dict:
    if request.headers.get("content-type", "").startswith("multipart/"):
        return await _import_upload(request, who)
    body = _zoo_import(await read_json(request))
    project = project_named(who.session, body.project)
    need(who, "editor", project.id)
    options = model_options(body.options)
    row = await _register(request, who.session, project, body.name, "zoo", f"zoo:{body.zoo}", options, None, "")
    audit(who, "model.import", f"model:{row.id}", zoo=body.zoo, options=options)
    return model_view(row)


@router.get("/v1/models/{model_id}", responses=errors(404))
def get_model(model_id: int, who: Caller = Depends(caller)) -> dict:
    row = get_row(who.session, ModelRow, model_id, "model")
    need(who, "viewer", row.project_id)
    return model_view(row)


@router.get("/v1/models", responses=errors(404))
def list_models(who: Caller = Depends(caller), project: str | None = None, limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> dict:
    """The models the key may see, newest first: of one project (by name) or of every project in its scope."""
    need(who, "viewer")
    total, rows = page(who.session, ModelRow, lambda column: in_scope(who, column), project, limit, offset)
    return {"total": total, "limit": limit, "offset": offset, "models": [model_view(r) for r in rows]}


async def _import_upload(request: Request, who: Caller) -> dict:
    config = request.app.state.config
    form = await request.form(max_part_size=config.max_upload_bytes)
    upload, project_name, name = form.get("file"), form.get("project"), form.get("name")
    if not isinstance(upload, UploadFile) or not project_name or not name:
        raise HTTPException(422, "a model upload is multipart with fields file, project and name (options: a JSON object)")
    if len(str(name)) > 200:
        raise HTTPException(422, "a model's name is at most 200 characters")
    project = project_named(who.session, str(project_name))
    need(who, "editor", project.id)
    suffix = Path(upload.filename or "").suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise HTTPException(422, f"an upload is one of {', '.join(sorted(UPLOAD_SUFFIXES))}; got '{upload.filename}'")
    try:
        options = json.loads(str(form.get("options") or "{}"))
    except ValueError as exc:
        raise HTTPException(422, f"the form field options is not JSON ({first_line(exc)}); send a JSON object of model options") from exc
    options = model_options(options)
    path, size, sha = await save_upload(upload, config.data_dir / "models", suffix, config.max_upload_bytes)
    try:
        row = await _register(request, who.session, project, str(name), UPLOAD_SUFFIXES[suffix], str(path), options, size, sha, upload.filename or "")
    except Exception:
        discard_upload(who.session, path)
        raise
    audit(who, "model.import", f"model:{row.id}", file=upload.filename, bytes=size)
    return model_view(row)


def discard_upload(s: Session, path: Path) -> None:
    """An upload whose row was refused (unreadable, or the database refused the row) is deleted,
    unless a stored model or dataset names the same file: uploads are kept under their content hash."""
    if s.in_transaction():
        s.rollback()
    named = s.scalar(select(ModelRow.id).where(ModelRow.spec == str(path)).limit(1))
    if named is None and s.scalar(select(DatasetRow.id).where(DatasetRow.path == str(path)).limit(1)) is None:
        path.unlink(missing_ok=True)


async def save_upload(upload: UploadFile, folder: Path, suffix: str, max_bytes: int) -> tuple[Path, int, str]:
    """The upload streamed to `folder` under its content hash: (path, bytes, sha256); 413 past `max_bytes`."""
    folder.mkdir(parents=True, exist_ok=True)
    digest, size, path = hashlib.sha256(), 0, folder / f"upload-{queue.now().strftime('%Y%m%d%H%M%S%f')}{suffix}"
    with path.open("wb") as out:
        while chunk := await upload.read(1 << 20):
            size += len(chunk)
            if size > max_bytes:
                out.close()
                path.unlink()
                raise HTTPException(413, f"the upload is over the server's limit of {max_bytes} bytes")
            digest.update(chunk)
            out.write(chunk)
    final = folder / f"{digest.hexdigest()[:16]}{suffix}"
    path.replace(final)
    return final, size, digest.hexdigest()


async def _register(request: Request, s: Session, project: ProjectRow, name: str, kind: str, spec: str, options: dict, size: int | None, sha: str,
                    shown: str = "") -> ModelRow:
    # read in a thread: seconds of loading and capture (a zoo model's imports) on the event loop held every other request
    summary = await run_in_threadpool(_summary, spec, options, request.app.state.config.allow_pickle, shown)
    row = ModelRow(project_id=project.id, name=name, kind=kind, spec=spec, options=options, size_bytes=size, sha256=sha, summary=summary, created_at=queue.now())
    s.add(row)
    s.flush()
    return row


async def read_json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise HTTPException(422, f"the body is not JSON ({first_line(exc)})") from exc


def _zoo_import(doc: Any) -> ZooImport:
    try:
        return ZooImport.model_validate(doc)
    except ValidationError as exc:  # the route reads its body itself: FastAPI has not checked it
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"]) or "the body"
        raise HTTPException(422, f"{where}: {error['msg']}; a zoo import is a JSON object with project, name and zoo (options: an object of model options)") from exc


def model_options(options: Any) -> dict[str, Any]:
    if not isinstance(options, dict):
        raise HTTPException(422, f"options must be a JSON object of model options ({', '.join(sorted(MODEL_OPTIONS))}), got {type(options).__name__}")
    unknown = sorted(set(options) - MODEL_OPTIONS)
    if unknown:
        raise HTTPException(422, f"unknown model option(s) {', '.join(unknown)}; known: {', '.join(sorted(MODEL_OPTIONS))}")
    return options


_READING = threading.Lock()  # one model read at a time (graph capture is not made to run in two threads at once)


def _summary(spec: str, options: dict[str, Any], allow_pickle: bool, shown: str = "") -> dict[str, Any]:
    """The model's IR summary and signature (untimed), or why it cannot be loaded (a 422 naming the
    upload by its own file name, never the server's path)."""
    from agnitra import api

    try:
        with _READING:
            report = api.inspect(spec, device="cpu", timed=False, allow_pickle=allow_pickle, **options)
    except UserError as exc:
        raise HTTPException(422, str(exc).replace(spec, shown or spec)) from exc
    ir = report.ir
    return {"nodes": len(ir.nodes), "params": ir.params, "op_mix": ir.op_mix(), "source": ir.source, "graph_breaks": len(ir.graph_breaks),
            "signature": report.signature, "workload": report.workload}

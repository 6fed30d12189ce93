"""Datasets: a project's own check inputs (`.pt` or `.npz`, one tensor per model input), uploaded
like a model (size-limited, streamed to the data folder) and read at upload by the loader
`--check-inputs` uses (weights only, no pickles): a file it cannot read is refused there. A job
naming one (`dataset_id`) verifies every candidate on it; whether it fits the model's inputs is
checked when the job runs (a misfit fails the job with the reason)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.datastructures import UploadFile

from agnitra.errors import UserError
from agnitra.service import queue
from agnitra.service.access import Caller, Route, audit, caller, in_scope, need
from agnitra.service.routes.models import discard_upload, save_upload, upload_form
from agnitra.service.views import BODY, CALLER, MAX_OFFSET, errors, get_row, iso, page, project_named
from agnitra.store.service_schema import DatasetRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))

SUFFIXES = (".pt", ".npz")
UPLOAD = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": upload_form()}}}}


def dataset_view(row: DatasetRow) -> dict:
    return {"id": row.id, "project_id": row.project_id, "name": row.name, "filename": row.filename, "size_bytes": row.size_bytes,
            "sha256": row.sha256, "summary": row.summary, "created_at": iso(row.created_at)}


@router.post("/v1/datasets", status_code=201, responses=errors(*BODY, 404), openapi_extra=UPLOAD)
async def upload_dataset(request: Request, who: Caller = Depends(caller)) -> dict:
    config = request.app.state.config
    if not request.headers.get("content-type", "").startswith("multipart/"):
        raise HTTPException(422, "a dataset upload is multipart with fields file (.pt or .npz), project and name")
    form = await request.form(max_part_size=config.max_upload_bytes)
    upload, project_name, name = form.get("file"), form.get("project"), str(form.get("name") or "")
    if not isinstance(upload, UploadFile) or not project_name or not name:
        raise HTTPException(422, "a dataset upload is multipart with fields file (.pt or .npz), project and name")
    if len(name) > 200:
        raise HTTPException(422, "a dataset's name is at most 200 characters")
    project = project_named(who.session, str(project_name))
    need(who, "editor", project.id)
    shown = Path(upload.filename or "").name
    suffix = Path(shown).suffix.lower()
    if suffix not in SUFFIXES:
        raise HTTPException(422, f"a dataset is a .pt file (torch.save of a tensor or a tuple of tensors) or an .npz file (numpy.savez); got '{shown}'")
    path, size, sha = await save_upload(upload, config.data_dir / "datasets", suffix, config.max_upload_bytes)
    try:
        summary = _summary(path, shown)
        row = DatasetRow(project_id=project.id, name=name, filename=shown, path=str(path), size_bytes=size, sha256=sha, summary=summary,
                         created_by=who.key.id, created_at=queue.now())
        who.session.add(row)
        who.session.flush()
    except Exception:
        discard_upload(who.session, path)
        raise
    audit(who, "dataset.upload", f"dataset:{row.id}", file=shown, bytes=size)
    return dataset_view(row)


@router.get("/v1/datasets/{dataset_id}", responses=errors(404))
def get_dataset(dataset_id: int, who: Caller = Depends(caller)) -> dict:
    row = get_row(who.session, DatasetRow, dataset_id, "dataset")
    need(who, "viewer", row.project_id)
    return dataset_view(row)


@router.get("/v1/datasets", responses=errors(404))
def list_datasets(who: Caller = Depends(caller), project: str | None = None, limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> dict:
    """The datasets the key may see, newest first: of one project (by name) or of every project in its scope."""
    need(who, "viewer")
    total, rows = page(who.session, DatasetRow, lambda column: in_scope(who, column), project, limit, offset)
    return {"total": total, "limit": limit, "offset": offset, "datasets": [dataset_view(r) for r in rows]}


def _summary(path: Path, shown: str) -> dict:
    """The file read as `--check-inputs` reads it: rows and each tensor's shape and dtype, or a 422
    naming the upload by its own name (never the server's path)."""
    from agnitra.workloads.check_inputs import read_check_inputs

    try:
        tensors = read_check_inputs(path)
    except UserError as exc:
        raise HTTPException(422, str(exc).replace(f"--check-inputs {path}", shown).replace(str(path), shown)) from exc
    return {"tensors": [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in tensors],
            "rows": int(tensors[0].shape[0]) if tensors[0].dim() else 0}

"""Export of a finished job's answer: its chosen recipe (agnitra.recipe/1, what `agnitra.apply`
takes), or the model with that recipe applied as an ONNX file (the `ort/export.py` path the
`onnxruntime` transform builds through) or a torch.export archive (.pt2, dim 0 of each input
dynamic where the model allows it, `Dim.AUTO`).

A recipe step that is not part of the model's graph cannot be exported: torch.compile modes, CUDA
graphs, generated Triton kernels, ONNX Runtime, thread counts and TF32 (every runtime or backend
step, and `triton-kernels`) are refused with a 422 naming the step, never exported without it: the
recipe export plus `agnitra.apply` rebuilds that answer. An export the exporter refuses (a model
whose path depends on its inputs' values, one that keeps state) is a 422 with its reason.

ONNX and .pt2 exports run synchronously in the request, in a child process killed at
`EXPORT_LIMIT_S` (the server's threads and memory stay out of the exporters' way); the file is kept
beside the job's run folder (data_dir/jobs/<id>/export/) and later requests are answered from it.
The recipe is read by viewers; a model export, which loads and exports the model on the server, is
an editor's. Every export is audited.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
from pathlib import Path

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from agnitra.errors import first_line
from agnitra.service.access import Caller, Route, audit, caller, need
from agnitra.service.views import BODY, CALLER, errors, get_row
from agnitra.store.service_schema import JobRow, ModelRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))

EXPORT_LIMIT_S = 300.0
LOAD_SETTINGS = ("dtype", "batch", "seq_len")  # a job's settings that change the model loaded (as in the worker)
WHY_NOT = {"compile": "a torch.compile mode (compiled when the recipe is applied)", "cuda-graphs": "CUDA-graph replay (captured on the device at run time)",
           "triton-kernels": "generated Triton kernels (tuned and launched at run time)", "onnxruntime": "ONNX Runtime (its session is built when the recipe is applied)",
           "threads": "a thread count (a setting of the running process)", "tf32": "TF32 matmuls (a setting of the running process)"}

EXPORTED = {"description": "the recipe (format recipe) as JSON, or the model's file (onnx, pt2)",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}


class ExportIn(BaseModel):
    job_id: int
    format: str = Field(pattern="^(recipe|onnx|pt2)$")


@router.post("/v1/export", response_model=None, responses={**errors(*BODY, 404, 409), 200: EXPORTED})
def export(body: ExportIn, request: Request, who: Caller = Depends(caller)):
    from agnitra.transforms.recipe import RECIPE_VERSION, Recipe

    job = get_row(who.session, JobRow, body.job_id, "job")
    need(who, "viewer" if body.format == "recipe" else "editor", job.project_id)
    if job.status != "done":
        raise HTTPException(409, f"job {job.id} is {job.status}: only a finished job's answer is exported; wait until it is done (GET /v1/jobs/{job.id})")
    recipe = Recipe.from_dict({"version": RECIPE_VERSION, **(job.result.get("recipe") or {"steps": []})})
    path = None if body.format == "recipe" else _exported_file(who.session.get(ModelRow, job.model_id), job, recipe, body.format, request)
    # audited once the file is made: a write before the export would hold the store's write lock
    # (and every worker's lease renewal behind it) for the export's seconds
    audit(who, "job.export", f"job:{job.id}", format=body.format, recipe=recipe.name)
    if path is None:
        return recipe.to_dict()
    return FileResponse(path, media_type="application/octet-stream", filename=f"job-{job.id}.{body.format}")


def _exported_file(model: ModelRow, job: JobRow, recipe, fmt: str, request: Request) -> Path:
    """The job's answer as a .onnx or .pt2 file, made on the first request and kept for the next."""
    _refuse_unexportable(recipe, fmt)
    folder = request.app.state.config.data_dir / "jobs" / str(job.id) / "export"
    path = folder / f"model.{fmt}"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        options = {**model.options, **{k: v for k, v in job.settings.items() if k in LOAD_SETTINGS}}
        if model.kind == "onnx":
            _onnx_model(model, recipe, fmt, path)
        else:
            _run_export(model, options, recipe.to_dict(), fmt, str(job.settings.get("device") or "cpu"), path, request.app.state.config.allow_pickle)
    return path


def _refuse_unexportable(recipe, fmt: str) -> None:
    from agnitra.transforms.base import get_transform

    for step in recipe.steps:
        if step.transform in WHY_NOT or get_transform(step.transform).stage != "module":
            why = WHY_NOT.get(step.transform, f"a {get_transform(step.transform).stage} step")
            raise HTTPException(422, f"the recipe's step '{step.transform}' is {why}: it cannot be exported into a .{fmt} file; "
                                     "export the recipe (format recipe) and rebuild the answer with agnitra.apply(model, recipe)")


def _onnx_model(model: ModelRow, recipe, fmt: str, path: Path) -> None:
    """An uploaded ONNX model: its own file is its ONNX export (no recipe step applies to it); it has
    no PyTorch graph for a .pt2."""
    if fmt == "pt2":
        raise HTTPException(422, f"model {model.id} ({model.name}) is an ONNX model: it has no PyTorch graph to export as .pt2; export it as onnx")
    shutil.copyfile(model.spec, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)


def _children():
    """Export processes fork from a server of their own that imported torch and the exporters once
    (not from this threaded server): each export starts in a moment, not an import's seconds."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "torch", "agnitra.ort.export", "agnitra.transforms.patcher", "agnitra.workloads.prepare"])
    return context


def _run_export(model: ModelRow, options: dict, recipe: dict, fmt: str, device: str, path: Path, allow_pickle: bool) -> None:
    """The export in a child process, killed past EXPORT_LIMIT_S; its refusal or failure a 422."""
    context = _children()
    parent_end, child_end = context.Pipe(duplex=False)
    child = context.Process(target=_export_child, args=(model.spec, options, recipe, fmt, device, str(path), allow_pickle, child_end), daemon=True)
    child.start()
    child_end.close()
    answered = parent_end.poll(EXPORT_LIMIT_S)
    try:
        error = parent_end.recv() if answered else None
    except EOFError:  # it died without a word (killed, out of memory, a crash in native code)
        error = None
    if not answered:
        child.kill()
    child.join(10)
    shown = f"model {model.id} ({model.name})"
    if answered and error is None:
        raise HTTPException(422, f"the .{fmt} export of {shown} ended without an answer (exit code {child.exitcode}); "
                                 "export the recipe (format recipe) and export the model in your own process with agnitra.apply")
    if not answered:
        raise HTTPException(422, f"the .{fmt} export of {shown} ran past the server's limit of {EXPORT_LIMIT_S:.0f} s; "
                                 "export the recipe (format recipe) and export the model in your own process with agnitra.apply")
    if error:
        raise HTTPException(422, error.replace(model.spec, shown))


def _export_child(spec: str, options: dict, recipe: dict, fmt: str, device: str, path: str, allow_pickle: bool, answer) -> None:
    from agnitra.bench.isolated import die_with_parent

    die_with_parent()
    try:
        export_model(spec, options, recipe, fmt, device, Path(path), allow_pickle)
        answer.send("")
    except Exception as exc:  # noqa: BLE001 - a refusal or an exporter's failure: the request's one line
        answer.send(first_line(exc, limit=1000))


def export_model(spec: str, options: dict, recipe: dict, fmt: str, device: str, path: Path, allow_pickle: bool = False) -> None:
    """The model `spec` loaded as a job loads it, the recipe applied (as `agnitra.apply`), written
    to `path` as ONNX or .pt2."""
    import torch

    from agnitra.errors import UserError
    from agnitra.transforms.base import TransformContext
    from agnitra.transforms.patcher import apply_recipe
    from agnitra.transforms.recipe import Recipe
    from agnitra.workloads.prepare import prepare_workload

    workload, dev = prepare_workload(spec, device=device, allow_pickle=allow_pickle, **options)
    chosen = Recipe.from_dict(recipe)
    model = apply_recipe(chosen, TransformContext(workload, dev)).model if chosen.steps else workload.model
    written = path.with_suffix(f".{os.getpid()}.tmp")
    if fmt == "onnx":
        from agnitra.ort.export import export_onnx
        from agnitra.workloads.behaviour import check_not_frozen

        check_not_frozen(workload, "an ONNX export")
        export_onnx(dataclasses.replace(workload, model=model), written)
    else:
        inputs = tuple(workload.example_inputs)
        dims = tuple({0: torch.export.Dim.AUTO} if isinstance(t, torch.Tensor) and t.dim() else None for t in inputs)
        try:
            program = torch.export.export(model, inputs, dynamic_shapes=dims)
        except Exception as exc:  # noqa: BLE001 - torch.export raises many types
            raise UserError(f"the model with recipe '{chosen.name}' does not export with torch.export ({first_line(exc)}); "
                            "export the recipe (format recipe) and rebuild the answer with agnitra.apply(model, recipe)") from exc
        torch.export.save(program, str(written))
    os.replace(written, path)

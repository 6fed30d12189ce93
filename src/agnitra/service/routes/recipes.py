"""Recipe recommendation: `api.recommend` for an imported model, as `agnitra recommend` answers it:
the recipes that passed verification on the stored workloads nearest to it (by static signature),
on one kind of device, each with its measured speedup. Viewers may ask; nothing is changed."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field

from agnitra.errors import UserError
from agnitra.service.access import Caller, Route, caller, need
from agnitra.service.views import BODY, CALLER, errors, get_row
from agnitra.store.service_schema import ModelRow

router = APIRouter(route_class=Route, responses=errors(*CALLER))


class RecommendIn(BaseModel):
    model_id: int
    limit: int = Field(default=5, ge=1, le=50)
    device: str = Field(default="cpu", pattern=r"^(cpu|cuda|cuda:\d{1,2})$")  # the kind of device the recipes were measured on


@router.post("/v1/recipes/recommend", responses=errors(*BODY, 404))
def recommend(body: RecommendIn, request: Request, who: Caller = Depends(caller)) -> dict:
    from agnitra import api

    model = get_row(who.session, ModelRow, body.model_id, "model")
    need(who, "viewer", model.project_id)
    try:
        found = api.recommend(model.spec, device=body.device, limit=body.limit, allow_pickle=request.app.state.config.allow_pickle, **model.options)
    except UserError as exc:  # the model's file named by the model, never the server's path
        raise HTTPException(422, str(exc).replace(model.spec, f"model {model.id} ({model.name})")) from exc
    return {"model_id": model.id, "device": body.device, "recommendations": [dataclasses.asdict(r) for r in found]}

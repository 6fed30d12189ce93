"""What the advisor is shown: the workload's measured hotspots, its op mix, the device, and the
transforms searched here with their parameter schemas and the choices applicable on this run.

Only names, shapes, counts and timings leave the machine: no weight, no input value, no tensor.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agnitra.ir.graph import GraphIR
from agnitra.ir.hotspots import module_hotspots
from agnitra.results import DeviceReport, to_dict
from agnitra.search.space import Candidate, Skipped
from agnitra.transforms.base import get_transform
from agnitra.workloads.base import Workload, tensor_leaves

MAX_RECIPES = 8  # asked for; more are rejected unread (`proposals.validate`)
TOP_HOTSPOTS = 10
REPLY_FORMAT = {"recipes": [{"steps": [{"transform": "NAME", "params": {"PARAMETER": "VALUE"}}], "rationale": "one line: why it should pay here"}]}
SYSTEM = (
    "You advise Agnitra, an inference optimizer for PyTorch. You are shown one model's measured hotspots, its op mix, "
    "the device it runs on and the transforms Agnitra can apply to it here, each with its parameters and the choices "
    f"that apply on this run. Propose up to {MAX_RECIPES} recipes likely to make the model faster with outputs within "
    "tolerance, most promising first. A recipe is an ordered list of steps, each a transform and its parameters, taken "
    "only from the listed choices. Every recipe is verified and measured before it is used. Answer with one JSON object "
    f"and nothing else, in this form: {json.dumps(REPLY_FORMAT)}"
)
RULES = [
    "use only transforms listed under 'transforms', with the parameter values of one of their 'choices'",
    "at most 3 module transforms (at most one of each exclusive group), then at most 2 runtime transforms, or one backend instead",
    "module transforms come first, then runtime transforms, then a backend",
]


def chat_request(model: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request body (saved as the run's advisor/prompt.json)."""
    return {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": json.dumps(to_dict(facts), separators=(",", ":"), default=str)}],
        "response_format": {"type": "json_object"},
        "temperature": 0,
    }


def facts(workload: Workload, ir: GraphIR | None, device_report: DeviceReport, space: list[Candidate], skipped: list[Skipped], objective: str) -> dict[str, Any]:
    return {
        "objective": objective,
        "workload": _workload(workload, ir),
        "device": _device(device_report),
        "hotspots": _hotspots(ir, device_report, workload),
        "op_mix": ir.op_mix() if ir is not None else None,
        "transforms": catalogue(space),
        "not_applicable": [{"transform": s.transform, "reason": s.reason} for s in skipped],
        "rules": RULES,
        "reply_format": REPLY_FORMAT,
    }


def catalogue(space: list[Candidate]) -> list[dict[str, Any]]:
    """Each transform of the space: what it does, its parameters' types and defaults, and the
    choices searched here (each a one-step recipe of the space) with the speedup its rules expect."""
    choices: dict[str, list[dict]] = {}
    for candidate in space:
        if len(candidate.recipe.steps) == 1:
            step = candidate.recipe.steps[0]
            choices.setdefault(step.transform, []).append({"params": dict(step.params), "prior": round(candidate.prior, 3), "lossy": get_transform(step.transform).lossy(dict(step.params))})
    out = []
    for name, offered in choices.items():
        transform = get_transform(name)
        defaults = transform.Params()
        params = {f.name: {"type": type(getattr(defaults, f.name)).__name__, "default": getattr(defaults, f.name)} for f in dataclasses.fields(transform.Params)}
        out.append({"name": name, "stage": transform.stage, "description": transform.description, "exclusive_group": transform.exclusive or None,
                    "parameters": params, "choices": offered})
    return out


def _workload(workload: Workload, ir: GraphIR | None) -> dict[str, Any]:
    return {
        "name": workload.name,
        "task": getattr(workload.task, "value", str(workload.task)),
        "dtype": str(workload.dtype).replace("torch.", ""),
        "batch": workload.batch,
        "decoder": workload.decoder is not None,
        "inputs": [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in tensor_leaves(workload.example_inputs)],
        "parameters": sum(p.numel() for p in workload.model.parameters()),
        "graph": {"nodes": len(ir.nodes), "gflops": round(ir.total_flops / 1e9, 6), "mbytes": round(ir.total_bytes / 1e6, 3)} if ir is not None else None,
    }


def _device(report: DeviceReport) -> dict[str, Any]:
    signature = {k: v for k, v in report.signature.items() if k != "id"}
    return {"name": report.name, "kind": report.kind, "signature": signature, "ceilings": {k: v for k, v in report.ceilings.items() if k != "note"}}


def _hotspots(ir: GraphIR | None, device_report: DeviceReport, workload: Workload) -> list[dict[str, Any]]:
    """The modules that take most of the time (by FLOPs where the run was not timed)."""
    if ir is None:
        return []
    spots = module_hotspots(ir, device_report.ceilings, workload.dtype)[:TOP_HOTSPOTS]
    return [{"module": s.module or "(root)", "module_type": s.module_type, "op_kind": s.kind, "time_share": _round(s.share, 4), "time_us": _round(s.time_us, 2),
             "gflops": round(s.flops / 1e9, 6), "mbytes": round(s.bytes / 1e6, 4), "intensity": _round(s.intensity, 3), "bound": s.bound or None} for s in spots]


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)

"""The searched workload as one dataset row without a recipe: what the cost model predicts from."""

from __future__ import annotations

import torch

from agnitra.results import DeviceReport
from agnitra.store.io import DEVICE_PREFIX, HOTSPOT_PREFIX, SIGNATURE_PREFIX, family_of
from agnitra.workloads.base import Workload


def workload_row(workload: Workload, signature: dict | None, device_report: DeviceReport, device: torch.device) -> dict:
    row = {
        "workload": workload.name, "source": workload.source, "family": family_of(workload.name, workload.source or ""), "task": workload.task.value,
        "comparison": workload.verified_by, "batch": workload.decoder.batch if workload.decoder else workload.batch, "device_kind": device.type,
    }
    if signature:
        row.update({SIGNATURE_PREFIX + n: v for n, v in zip(signature.get("names", []), signature.get("values", []))})
        row.update({HOTSPOT_PREFIX + k: v for k, v in (signature.get("measured") or {}).items()})
    row.update({DEVICE_PREFIX + k: v for k, v in (device_report.signature or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return row

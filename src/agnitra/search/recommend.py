"""Recipe reuse: what worked on the workloads nearest to this one, from the measurement store.

Nearest by the static workload signature (scipy's k-d tree, Euclidean distance; every
feature is scaled to about [0, 1]); on the same kind of device; only recipes whose outputs passed
verification, each with the best speedup measured for it over its run's baseline. `optimize`
measures these first (warm start): the transforms' priors order the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import select

from agnitra.search.space import Candidate
from agnitra.store import Store
from agnitra.store.schema import DeviceRow, MeasurementRow, RunRow, WorkloadRow
from agnitra.transforms.recipe import Recipe

NEIGHBOURS = 5


@dataclass
class Recommendation:
    recipe: dict  # agnitra.recipe/1
    name: str
    workload: str  # the stored workload it worked on
    distance: float  # signature distance to this workload (0: the same)
    device: str
    speedup: float  # best measured speedup over the baseline of its run
    quality_metric: str
    quality_value: float | None
    measurements: int  # passing measurements behind it
    predicted: dict | None = None  # the cost model's prediction for this workload (speedup, its spread, P(pass))


def recommend(store: Store, signature: dict, device_kind: str, limit: int = 5, neighbours: int = NEIGHBOURS) -> list[Recommendation]:
    """The best recipes measured on the `neighbours` stored workloads nearest to `signature`."""
    names, query = signature["names"], np.asarray(signature["values"], dtype=np.float64)
    with store.session() as session:
        rows = session.scalars(select(WorkloadRow).where(WorkloadRow.signature_version == signature["version"])).all()
        stored = [(row, [row.signature.get(n) for n in names]) for row in rows]  # a damaged signature reads empty: left out
        stored = [(row, vector) for row, vector in stored if None not in vector]
        if not stored:
            return []
        from scipy.spatial import KDTree  # scikit-learn's neighbours cost 0.8 s more to import, in every run

        tree = KDTree(np.asarray([v for _, v in stored], dtype=np.float64))
        distances, positions = tree.query(query, k=[*range(1, min(neighbours, len(stored)) + 1)])
        nearest = {stored[p][0].id: (stored[p][0].name, float(d)) for p, d in zip(positions, distances)}
        query_rows = session.execute(
            select(MeasurementRow, RunRow.workload_id, DeviceRow.name).join(RunRow, MeasurementRow.run_id == RunRow.id)
            .join(DeviceRow, RunRow.device_id == DeviceRow.id)
            .where(RunRow.workload_id.in_(list(nearest)), DeviceRow.kind == device_kind, MeasurementRow.passed.is_(True),
                   MeasurementRow.status == "ok", MeasurementRow.recipe.is_not(None))
        ).all()
    best: dict[str, Recommendation] = {}
    for m, workload_id, device in query_rows:
        if not m.median_ms or not m.baseline_ms or not (m.recipe or {}).get("steps"):
            continue  # a damaged recipe cell reads empty
        try:
            Recipe.from_dict(m.recipe)
        except Exception:  # noqa: BLE001 - a recipe of a transform this version lacks, or damaged: not recommended
            continue
        key = Recipe.from_dict(m.recipe).key()
        name, distance = nearest[workload_id]
        speedup = m.baseline_ms / m.median_ms
        seen = best.get(key)
        if seen is None or (distance, -speedup) < (seen.distance, -seen.speedup):
            best[key] = Recommendation(m.recipe, m.variant, name, round(distance, 6), device, round(speedup, 4), m.quality_metric, m.quality_value,
                                       (seen.measurements if seen else 0) + 1)
        else:
            seen.measurements += 1
    ranked = sorted(best.values(), key=lambda r: (r.distance, -r.speedup))
    return ranked[:limit]


def warm_start(space: list[Candidate], recommended: list[Recommendation]) -> tuple[list[Candidate], list[str]]:
    """The space with the recommended recipes it holds moved to the front, in recommendation
    order; and their names."""
    keys = [Recipe.from_dict(r.recipe).key() for r in recommended]
    first = [c for key in keys for c in space if c.recipe.key() == key]
    return first + [c for c in space if c not in first], [c.recipe.name for c in first]


def with_predictions(recommended: list[Recommendation], store: Store, workload_row: dict) -> str:
    """Each recommendation's predicted effect on this workload, from a cost model trained on the
    store's measurements on this kind of device; returns why there is none ('' when there is)."""
    from agnitra.search.costmodel.from_store import train_from_store

    if not recommended:
        return ""
    model, _rows, why_not = train_from_store(store, workload_row.get("device_kind"))
    if model is None:
        return f"no prediction: {why_not}"
    queries = [dict(workload_row, steps=r.recipe.get("steps", [])) for r in recommended]
    for r, p in zip(recommended, model.predict(queries)):
        r.predicted = p.to_dict()
    return ""

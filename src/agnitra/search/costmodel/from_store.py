"""A cost model trained on the store's measurements on one kind of device, or why there is none:
what the `model` strategy and `recommend` both start from. Where the store holds fewer than
MIN_STORED of its own, the seed's (`costmodel.seed`: Agnitra's own collections, shipped with it)
are added, and the model's notes say so."""

from __future__ import annotations

from agnitra.errors import UserError
from agnitra.search.costmodel.dataset import load_rows
from agnitra.search.costmodel.model import CostModel, timed
from agnitra.search.costmodel.seed import ENV, describe, seed_enabled, seed_rows

MIN_STORED = 30  # timed measurements on this kind of device before a model is trusted to order
MAX_TRAINING_ROWS = 20000  # the most recent, so training stays about a second


def train_from_store(store, device_kind: str | None) -> tuple[CostModel | None, list[dict], str]:
    """(model, the rows it learned from, '') or (None, [], why not)."""
    rows = load_rows(store, device_kind=device_kind)[-MAX_TRAINING_ROWS:]
    own = sum(1 for r in rows if timed(r))
    notes = []
    if own < MIN_STORED:
        seed = seed_rows(device_kind)
        if seed:
            rows = seed + rows
            notes.append(f"learned from the {sum(1 for r in seed if timed(r))} measurements shipped with Agnitra on {describe(seed)} and {own} of this machine's: "
                         f"its predictions are those machines' until the store holds {MIN_STORED} of its own (`agnitra collect`)")
    if sum(1 for r in rows if timed(r)) < MIN_STORED:
        seed_said = "" if seed_enabled() else f"; the shipped seed is off ({ENV}=0)"
        return None, [], f"{own} measurement(s) on {device_kind} in the store (fewer than {MIN_STORED}; `agnitra collect` fills it){seed_said}"
    try:
        model = CostModel.fit(rows)
    except UserError as exc:  # LightGBM missing
        return None, [], f"no cost model ({exc})"
    model.notes[:0] = notes
    return model, rows, ""

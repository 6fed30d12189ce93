"""A cost model trained on the store's measurements on one kind of device, or why there is none:
what the `model` strategy and `recommend` both start from."""

from __future__ import annotations

from agnitra.errors import UserError
from agnitra.search.costmodel.dataset import load_rows
from agnitra.search.costmodel.model import CostModel, timed

MIN_STORED = 30  # timed measurements on this kind of device before a model is trusted to order
MAX_TRAINING_ROWS = 20000  # the most recent, so training stays about a second


def train_from_store(store, device_kind: str | None) -> tuple[CostModel | None, list[dict], str]:
    """(model, the rows it learned from, '') or (None, [], why not)."""
    rows = load_rows(store, device_kind=device_kind)[-MAX_TRAINING_ROWS:]
    measured = sum(1 for r in rows if timed(r))
    if measured < MIN_STORED:
        return None, [], f"{measured} measurement(s) on {device_kind} in the store (fewer than {MIN_STORED}; `agnitra collect` fills it)"
    try:
        return CostModel.fit(rows), rows, ""
    except UserError as exc:  # LightGBM missing
        return None, [], f"no cost model ({exc})"

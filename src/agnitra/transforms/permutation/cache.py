"""Permutations kept and reused: one JSON file per (model weights as they are before the step, the
step, the units an earlier step fixed, the solver's time, Agnitra's version), holding each space's
channel order under a label made from the weight axes it moves. A new version of Agnitra, other
weights or other settings miss; a damaged file is set aside and the orders are solved again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from agnitra.fileio import atomic_write_text, set_aside
from agnitra.transforms.permutation.spaces import Space

SCHEMA = "agnitra.layout-cache/1"
RULES = 2  # which spaces a step may order (order._spaces_for): orders kept under other rules are not reused


def _digest(named: list[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 over each tensor's name, shape, dtype and bytes."""
    digest = hashlib.sha256()
    for name, tensor in named:
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}{tuple(data.shape)}{data.dtype}".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()


def weights_digest(model: nn.Module) -> str:
    """Every parameter and buffer of the model."""
    return _digest(list(model.named_parameters()) + list(model.named_buffers()))


def inputs_digest(batches: list[tuple]) -> str:
    """The calibration batches' tensors (the activation norms the orders weigh by)."""
    from agnitra.pytree import tensor_leaves

    return _digest([(str(i), t) for i, batch in enumerate(batches) for t in tensor_leaves(batch)])


def space_label(space: Space) -> str:
    return hashlib.sha256("|".join(sorted(f"{a.name}:{a.dim}" for a in space.axes)).encode()).hexdigest()[:16]


class PermutationCache:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.notes: list[str] = []

    def key(self, model: nn.Module, step_text: str, unit: int, seconds: float, calibration: list[tuple] = ()) -> str:
        from agnitra._version import __version__

        tag = json.dumps({"weights": weights_digest(model), "step": step_text, "unit": unit, "seconds": seconds, "calibration": inputs_digest(list(calibration)),
                          "agnitra": __version__, "rules": RULES}, sort_keys=True)
        return hashlib.sha256(tag.encode()).hexdigest()[:32]

    def get(self, key: str) -> tuple[dict[str, list[int]], float] | None:
        """(each space's order by label, the solver's gain) as kept, or None."""
        path = self.folder / f"{key}.json"
        if not path.is_file():
            return None
        try:
            doc = json.loads(path.read_text())
            orders = doc["orders"] if doc.get("schema") == SCHEMA else None
            if not isinstance(orders, dict) or not all(isinstance(v, list) and all(isinstance(i, int) for i in v) for v in orders.values()):
                raise ValueError("not a layout cache record")
            gain = float(doc.get("gain", 0.0))
        except (ValueError, KeyError, OSError, TypeError) as exc:
            aside = set_aside(path)
            self.notes.append(f"the cached permutations {path} were damaged ({str(exc).splitlines()[0][:80]}): set aside as {aside.name if aside else 'gone'} and solved again")
            return None
        return orders, gain

    def put(self, key: str, orders: dict[str, list[int]], gain: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.folder / f"{key}.json", json.dumps({"schema": SCHEMA, "orders": orders, "gain": gain}))

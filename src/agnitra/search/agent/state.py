"""The agent's state: a fixed-length float vector of the workload's static signature (`sig.*`),
its hotspot features (`hot.*`: time shares per op kind, the device's busy share), the device's
numeric signature (`dev.*`, log-scaled), the batch, the choices made so far (one-hot per
dimension: absent or a choice, zeros while undecided) and the step index (one-hot). The names
are fixed when a policy is made and saved with it; what a workload lacks reads as 0."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from agnitra.search.agent.parts import Layout, Reach

SIG, HOT, DEV = "sig.", "hot.", "dev."
BOUND = 5.0  # every entry is clipped to [-BOUND, BOUND] (the observation space's box)
DEVICE_SCALE = 40.0  # log2(1 + bytes) of a large memory is about 37


@dataclass
class StateSpec:
    signature: list[str] = field(default_factory=list)
    hotspots: list[str] = field(default_factory=list)
    device: list[str] = field(default_factory=list)
    # a bit per dimension: whether the workload's space has any choice of it. Without it a policy
    # that learned "every part absent, then ONNX Runtime" could not tell a space without ONNX
    # Runtime and was forced into the last part (threads(count=0), a no-op) on held-out CPU
    # workloads. Policies saved before it read False.
    availability: bool = True

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "StateSpec":
        names = lambda prefix: sorted({k[len(prefix):] for r in rows for k, v in r.items() if k.startswith(prefix) and isinstance(v, (int, float))})  # noqa: E731
        return cls(names(SIG), names(HOT), names(DEV))

    def features(self, row: dict, reach: Reach | None = None) -> np.ndarray:
        """The workload's and device's part of the state (computed once per workload), and which
        dimensions its space (`reach`) has a choice of."""
        sig = [_number(row.get(SIG + n)) for n in self.signature]
        hot = [_number(row.get(HOT + n)) for n in self.hotspots]
        dev = [math.log2(1 + abs(_number(row.get(DEV + n)))) / DEVICE_SCALE for n in self.device]
        batch = math.log2(row["batch"]) / 10 if isinstance(row.get("batch"), (int, float)) and row["batch"] > 0 else 0.0
        available = ([float(a) for a in reach.available()] if reach is not None else []) if self.availability else []
        return np.asarray([*sig, *hot, *dev, batch, 1.0 if row.get("device_kind") == "cuda" else 0.0, *available], dtype=np.float32)

    def size(self, layout: Layout) -> int:
        return len(self.columns(layout))

    def columns(self, layout: Layout) -> list[str]:
        """A name for each entry of the state, in `observe`'s order: what a policy fine-tuned on
        another layout or feature set carries its input weights over by."""
        chosen = [f"choice:{d.transform}:{c}" for d in layout.dimensions for c in ("absent", *d.choices)]
        steps = [f"step:{d.transform}" for d in layout.dimensions] + ["step:done"]
        available = [f"available:{d.transform}" for d in layout.dimensions] if self.availability else []
        return [SIG + n for n in self.signature] + [HOT + n for n in self.hotspots] + [DEV + n for n in self.device] + ["batch", "cuda"] + available + chosen + steps

    def union(self, other: "StateSpec") -> "StateSpec":
        return StateSpec(sorted({*self.signature, *other.signature}), sorted({*self.hotspots, *other.hotspots}), sorted({*self.device, *other.device}), self.availability)

    def observe(self, features: np.ndarray, layout: Layout, actions: tuple[int, ...]) -> np.ndarray:
        """The state after `actions` (one per dimension decided so far)."""
        chosen = []
        for i, d in enumerate(layout.dimensions):
            one_hot = [0.0] * (1 + len(d.choices))
            if i < len(actions):
                one_hot[actions[i]] = 1.0
            chosen += one_hot
        step = [0.0] * (len(layout.dimensions) + 1)
        step[len(actions)] = 1.0
        return np.clip(np.concatenate([features, np.asarray(chosen + step, dtype=np.float32)]), -BOUND, BOUND).astype(np.float32)

    def to_dict(self) -> dict:
        return {"signature": self.signature, "hotspots": self.hotspots, "device": self.device, "availability": self.availability}

    @classmethod
    def from_dict(cls, doc: dict) -> "StateSpec":
        return cls(list(doc["signature"]), list(doc["hotspots"]), list(doc["device"]), bool(doc.get("availability", False)))


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)

"""The time a run may take, counted from when the user asked: every stage spends from one budget."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    total_s: float
    started: float = field(default_factory=time.monotonic)  # time.monotonic() at the start of the run
    phases: dict[str, float] = field(default_factory=dict)  # seconds each stage took, in the order they ran
    _marked: float = field(default=0.0, init=False, repr=False)  # elapsed() at the last mark

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def mark(self, stage: str) -> None:
        """Count the seconds since the last mark (the start at first) as `stage`'s."""
        now = self.elapsed()
        self.phases[stage] = round(self.phases.get(stage, 0.0) + now - self._marked, 1)
        self._marked = now

    def remaining(self) -> float:
        return self.total_s - self.elapsed()

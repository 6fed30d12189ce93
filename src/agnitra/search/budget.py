"""The time a run may take, counted from when the user asked: every stage spends from one budget."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    total_s: float
    started: float = field(default_factory=time.monotonic)  # time.monotonic() at the start of the run

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        return self.total_s - self.elapsed()

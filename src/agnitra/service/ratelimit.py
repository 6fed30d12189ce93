"""Per-caller rate limits (`agnitra serve --rate-limit N`): a token bucket for each API key or
token subject in the server process, N requests a minute with bursts up to N; health and metrics
take no key and are not limited."""

from __future__ import annotations

import threading
import time

MAX_BUCKETS = 10_000  # past this many callers, those whose bucket is full again are forgotten


class RateLimiter:
    def __init__(self, per_minute: int, clock=time.monotonic) -> None:
        self.per_minute, self.clock = per_minute, clock
        self.rate = per_minute / 60.0  # tokens a second
        self.buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, when counted)
        self.lock = threading.Lock()

    def take(self, caller: str) -> float:
        """0 when `caller` may make this request (it is counted), else the seconds until it may."""
        with self.lock:
            now = self.clock()
            tokens, then = self.buckets.get(caller, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - then) * self.rate)
            if tokens < 1.0:
                self.buckets[caller] = (tokens, now)
                return (1.0 - tokens) / self.rate
            self.buckets[caller] = (tokens - 1.0, now)
            if len(self.buckets) > MAX_BUCKETS:
                self._forget_idle(now)
            return 0.0

    def _forget_idle(self, now: float) -> None:
        full = [c for c, (tokens, then) in self.buckets.items() if tokens + (now - then) * self.rate >= self.per_minute]
        for caller in full:
            del self.buckets[caller]

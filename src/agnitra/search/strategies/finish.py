"""How likely a recipe's setup is to finish within the seconds it may take, from the stored setups
and timeouts of recipes of its class (`setup_class`: the mode of its compile step).

A timeout says only that the setup took longer than its limit: it is a right-censored setup time,
and the stored setups of a class with its timeouts give the chance of finishing within t seconds
(the Kaplan-Meier estimate, `scipy.stats.ecdf` over censored data; flat beyond the longest
observation). The setup model predicts a number and is then off by a spread assumed alike for
every recipe; a class whose setups mostly ran past their limits says more than that: on a GPU
the compiles that tune their kernels mostly did, and the estimate makes them less likely to be
asked for where the time left is short (the calibration: docs/search.md).
"""

from __future__ import annotations

from collections import defaultdict

from agnitra.search.costmodel.features import steps_of
from agnitra.search.costmodel.model import timeout_limit

MIN_CLASS_ROWS = 10  # stored setups and timeouts a class needs before its estimate is used
# the least chance a class is given: one whose stored setups all ran past their limits would never
# be measured again, and so never shown to finish where it can
MIN_FINISH = 0.05


def setup_class(steps: list[dict]) -> str | None:
    """The class whose stored setups say how long a recipe's takes: its compile step's mode;
    None for a recipe without a compile step."""
    for step in steps:
        if step.get("transform") == "compile":
            return f"compile:{(step.get('params') or {}).get('mode', 'default')}"
    return None


class FinishTimes:
    """Per setup class, the chance that a setup finishes within t seconds."""

    def __init__(self, rows: list[dict]) -> None:
        self.finished: dict[str, list[float]] = defaultdict(list)  # class -> setups that finished
        self.stopped: dict[str, list[float]] = defaultdict(list)  # class -> the limits timeouts ran past
        for row in rows:
            self._observe(row)
        curves = {cls: self._curve(cls) for cls in set(self.finished) | set(self.stopped)}
        self.curves = {cls: curve for cls, curve in curves.items() if curve is not None}
        self._known: dict[tuple[str, float], float] = {}  # (class, seconds) -> chance: asked of every candidate

    def learn(self, row: dict) -> None:
        """One more setup or timeout (this run's own): its class's estimate again."""
        cls = self._observe(row)
        curve = self._curve(cls) if cls is not None else None
        if curve is not None:
            self.curves[cls] = curve
            self._known = {k: v for k, v in self._known.items() if k[0] != cls}

    def p_finish(self, cls: str | None, seconds: float) -> float | None:
        """The chance a setup of class `cls` (`setup_class`) finishes within `seconds`; None where
        the class has no estimate (no compile step, or too few stored setups)."""
        curve = self.curves.get(cls)
        if curve is None:
            return None
        key = (cls, seconds)
        if key not in self._known:
            self._known[key] = max(MIN_FINISH, float(curve.evaluate(max(0.0, seconds))))
        return self._known[key]

    def _observe(self, row: dict) -> str | None:
        """Count a row's setup (finished) or timeout (censored at its limit) under its class."""
        cls = setup_class(steps_of(row))
        limit = timeout_limit(row.get("reason") or "") if row.get("status") == "timeout" else None
        if cls is None or not (limit or (row.get("status") == "ok" and row.get("setup_s"))):
            return None
        if limit:
            self.stopped[cls].append(float(limit))
        else:
            self.finished[cls].append(float(row["setup_s"]))
        return cls

    def _curve(self, cls: str):
        """The class's estimate, where it has MIN_CLASS_ROWS observations (None otherwise)."""
        if len(self.finished[cls]) + len(self.stopped[cls]) < MIN_CLASS_ROWS:
            return None
        return _finish_curve(self.finished[cls], self.stopped[cls])

    def describe(self, seconds: float) -> dict[str, float]:
        """Each class's chance of finishing within `seconds`: for notes and tests."""
        return {cls: round(float(curve.evaluate(seconds)), 3) for cls, curve in sorted(self.curves.items())}


def _finish_curve(finished: list[float], stopped: list[float]):
    """The Kaplan-Meier estimate of P(setup <= t): finished setups observed, timeouts censored at
    their limits. A class with no finished setup never finishes as far as the store knows."""
    from scipy.stats import CensoredData, ecdf

    if not finished:
        return _Never()
    return ecdf(CensoredData(uncensored=finished, right=stopped)).cdf


class _Never:
    def evaluate(self, seconds: float) -> float:
        return 0.0

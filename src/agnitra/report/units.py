"""Human-readable numbers for reports: times, bytes, FLOPs, rates, percentages.

Every formatter takes `None` (and NaN/inf) and answers `MISSING`, so callers can pass schema
fields straight through. Bytes use binary prefixes (KiB, MiB); FLOPs, bandwidth and energy
use SI prefixes (GFLOP, GB/s, mJ).
"""

from __future__ import annotations

import math

MISSING = "—"

_SI_UP = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_SI_DOWN = ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
_BINARY = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def is_number(value: object) -> bool:
    """True for a finite int or float (bools excluded)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def format_number(value: float | None, digits: int = 3) -> str:
    """About `digits` significant digits, thousands separators for large values.

    12345.6 -> "12,346"; 12.345 -> "12.3"; 0.012345 -> "0.0123"; 1.2e-6 -> "1.20e-06".
    """
    if not is_number(value):
        return MISSING
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10 ** digits:
        return f"{value:,.0f}"
    if magnitude >= 1e-3:
        decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
        return f"{value:.{decimals}f}"
    return f"{value:.{digits - 1}e}"


def format_si(value: float | None, unit: str, digits: int = 3) -> str:
    """`value` with an SI prefix: format_si(2.5e9, "FLOP") -> "2.50 GFLOP"."""
    if not is_number(value):
        return MISSING
    if value == 0:
        return f"0 {unit}"
    magnitude = abs(value)
    for scale, prefix in _SI_UP:
        if magnitude >= scale:
            return f"{format_number(value / scale, digits)} {prefix}{unit}"
    if magnitude >= 1:
        return f"{format_number(value, digits)} {unit}"
    for scale, prefix in _SI_DOWN:
        if magnitude >= scale:
            return f"{format_number(value / scale, digits)} {prefix}{unit}"
    return f"{format_number(value, digits)} {unit}"


def format_bytes(value: float | None, digits: int = 3) -> str:
    """Bytes with binary prefixes: 1536 -> "1.50 KiB", 3 * 2**30 -> "3.00 GiB"."""
    if not is_number(value):
        return MISSING
    magnitude = abs(value)
    for scale, unit in _BINARY:
        if magnitude >= scale:
            return f"{format_number(value / scale, digits)} {unit}"
    return f"{value:,.0f} B"


def format_mib(value: float | None, digits: int = 4) -> str:
    """Bytes as a bare number of MiB, for columns titled "MiB"."""
    if not is_number(value):
        return MISSING
    return format_number(value / 2**20, digits)


def format_flops(value: float | None, digits: int = 3) -> str:
    """A count of floating-point operations: 2.5e9 -> "2.50 GFLOP"."""
    return format_si(value, "FLOP", digits)


def format_flop_rate(value: float | None, digits: int = 3) -> str:
    """FLOP per second: 1.2e12 -> "1.20 TFLOP/s"."""
    return format_si(value, "FLOP/s", digits)


def format_bandwidth(value: float | None, digits: int = 3) -> str:
    """Bytes per second with SI prefixes, as bandwidths are quoted: 8.5e11 -> "850 GB/s"."""
    return format_si(value, "B/s", digits)


def format_energy(value: float | None, digits: int = 3) -> str:
    """Joules: 0.0123 -> "12.3 mJ"."""
    return format_si(value, "J", digits)


def format_time_us(value: float | None, digits: int = 3) -> str:
    """A duration given in microseconds, in the unit that reads best: ns, µs, ms or s."""
    if not is_number(value):
        return MISSING
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{format_number(value / 1e6, digits)} s"
    if magnitude >= 1e3:
        return f"{format_number(value / 1e3, digits)} ms"
    if magnitude >= 1 or value == 0:
        return f"{format_number(value, digits)} µs"
    return f"{format_number(value * 1e3, digits)} ns"


def format_time_ms(value: float | None, digits: int = 3) -> str:
    """A duration given in milliseconds, in the unit that reads best."""
    if not is_number(value):
        return MISSING
    return format_time_us(value * 1e3, digits)


def format_percent(fraction: float | None, decimals: int = 1) -> str:
    """A fraction as a percentage: 0.4567 -> "45.7%"."""
    if not is_number(fraction):
        return MISSING
    return f"{fraction * 100:.{decimals}f}%"


def format_throughput(value: float | None, unit: str = "", digits: int = 4) -> str:
    """A rate with its unit as the schema gives it: (1234.5, "items/s") -> "1,235 items/s"."""
    if not is_number(value):
        return MISSING
    return f"{format_number(value, digits)} {unit}".strip()


def format_intensity(value: float | None, digits: int = 3) -> str:
    """Arithmetic intensity in FLOP per byte."""
    if not is_number(value):
        return MISSING
    return f"{format_number(value, digits)} FLOP/B"


def truncate(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def format_correctness(metric: str, value: float | None, passed: bool) -> str:
    """One check as "metric=value ✓" (or ✗ when it failed); the value is left out when absent."""
    mark = "✓" if passed else "✗"
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return f"{metric} {mark}"
    if metric == "perplexity":  # a relative rise over the original's held-out perplexity
        return f"perplexity {value:+.2%} {mark}"
    shown = format_number(value, 3) if not isinstance(value, bool) else str(value)
    return f"{metric}={shown} {mark}"

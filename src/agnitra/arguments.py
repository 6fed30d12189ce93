"""What a user may pass to a verb, checked before any work is done.

Each rule raises a one-line `UserError` naming the flag and what it accepts. The SDK (`agnitra.api`)
checks every argument through these before it builds anything, and the CLI only calls the SDK, so
`agnitra optimize --budget -1` and `agnitra.optimize(model, budget="-1")` fail alike. `None` always
passes: it means "the default".
"""

from __future__ import annotations

import math
import numbers
from typing import Iterable

from agnitra.errors import UserError

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def count(flag: str, value: object, minimum: int = 1) -> None:
    """A whole number >= `minimum` (counts: --batch, --runs; 0 only where it means something)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum):
        raise UserError(f"{flag} must be a whole number >= {minimum}, got {value!r}")


def positive(flag: str, value: object) -> None:
    """A finite number > 0 (--max-error, --threshold)."""
    if value is not None and not (_is_real(value) and 0 < value < math.inf):
        raise UserError(f"{flag} must be a number > 0, got {value!r}")


def non_negative(flag: str, value: object) -> None:
    """A finite number >= 0 (--temperature)."""
    if value is not None and not (_is_real(value) and 0 <= value < math.inf):
        raise UserError(f"{flag} must be a number >= 0, got {value!r}")


def finite(flag: str, value: object) -> None:
    """Any finite number (--min-sqnr, in dB)."""
    if value is not None and not (_is_real(value) and math.isfinite(value)):
        raise UserError(f"{flag} must be a finite number, got {value!r}")


def fraction(flag: str, value: object) -> None:
    """A number in (0, 1] (--min-cosine, --min-token-agreement)."""
    if value is not None and not (_is_real(value) and 0 < value <= 1):
        raise UserError(f"{flag} must be a number in (0, 1], e.g. 0.99; got {value!r}")


def relative_change(flag: str, value: object) -> float | None:
    """A relative change: "1%", "0.5 %" or a number such as 0.01 (= 1%), >= 0 (--max-ppl-increase).
    Returns it as a fraction."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else value
    try:
        number = float(text[:-1]) / 100 if isinstance(text, str) and text.endswith("%") else float(text)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (0 <= number < math.inf):
        raise UserError(f"{flag} must be a relative change >= 0 such as 1% or 0.01; got {value!r}")
    return number


def one_of(flag: str, value: object, choices: Iterable[str], what: str = "value") -> None:
    """One of the known names (--objective, --device, --dtype, --task, --size)."""
    known = list(choices)
    if value is not None and value not in known:
        raise UserError(f"{flag}: unknown {what} {value!r}; use one of: {', '.join(known)}")


def each_one_of(flag: str, values: Iterable[object] | None, choices: Iterable[str], what: str = "value") -> None:
    """Every name of a list known (--variants, --peers)."""
    known = list(choices)
    for name in values or ():
        one_of(flag, name, known, what)


def duration(flag: str, value: str | float | int) -> float:
    """Seconds in a positive duration: '90s', '10m', '1h', '300' (seconds) or a number."""
    seconds = _seconds(value)
    if seconds is None or not 0 < seconds < math.inf:
        raise UserError(f"{flag} must be a positive duration such as 90s, 10m or 1h; got {value!r}")
    return seconds


def _seconds(value: str | float | int) -> float | None:
    if _is_real(value):
        return float(value) if abs(value) < 1e300 else math.inf  # an integer past a float's range (a JSON 1000...0)
    raw = str(value).strip().lower()
    scale = _DURATION_UNITS.get(raw[-1:], 1)
    number = raw[:-1] if raw[-1:] in _DURATION_UNITS else raw
    try:
        return float(number) * scale
    except ValueError:
        return None


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and (isinstance(value, numbers.Integral) or not math.isnan(value))

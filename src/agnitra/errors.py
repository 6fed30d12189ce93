"""Errors Agnitra raises on purpose.

`UserError` and its subclasses are problems the user can fix (bad path, wrong shapes, missing
device): the CLI prints their one-line message and exits with code 2, no traceback unless
`--debug`. Anything else reaching the CLI is a defect in Agnitra.
"""

from __future__ import annotations


class AgnitraError(Exception):
    """Base of every error Agnitra raises deliberately."""


class UserError(AgnitraError):
    """A problem with what the user asked for; the message names the problem and the fix."""

    exit_code = 2


class DeviceUnavailable(UserError):
    """The requested device does not exist on this machine."""


class WorkloadError(UserError):
    """A model or workload could not be loaded, built or run on its inputs."""


class NotApplicable(AgnitraError):
    """A variant or transform does not apply here; the message says why. Callers skip it."""


def check(condition: object, reason: str) -> None:
    """Raise NotApplicable(reason) unless `condition` holds."""
    if not condition:
        raise NotApplicable(reason)


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, shortened: for one-line reports."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}"

"""The call to the endpoint, through the official `openai` client (imported here only, when an
advisor is asked for), in a thread beside the baseline's measurement with a hard deadline.

Whatever goes wrong (no reply in time, HTTP 429 or any other status, a refused key, a closed
port, a reply the client cannot read) becomes the reply's `cause`, one line; nothing is raised
and nothing is retried: a retry would spend the budget the search needs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from agnitra.errors import first_line
from agnitra.search.advisor.settings import ENV_KEY

GRACE_S = 0.5  # past the client's own timeout, the thread is no longer waited for


@dataclass
class Reply:
    content: str | None = None  # the message's text
    cause: str = ""  # why there is no reply to read ('' where one came)
    elapsed_s: float = 0.0
    received: Any = None  # the response (or the error's body) as received, for reply.json


class Pending:
    """One call running in a daemon thread; `wait()` returns by the call's deadline whatever happens."""

    def __init__(self, url: str, request: dict, limit_s: float) -> None:
        self.limit_s, self.started = limit_s, time.monotonic()
        self._reply: Reply | None = None
        self._thread = threading.Thread(target=self._run, args=(url, request), name="agnitra-advisor", daemon=True)
        self._thread.start()

    def _run(self, url: str, request: dict) -> None:
        self._reply = ask(url, request, self.limit_s)

    def wait(self) -> Reply:
        self._thread.join(max(0.0, self.started + self.limit_s + GRACE_S - time.monotonic()))
        if self._reply is None:
            return Reply(cause=_timed_out(self.limit_s), elapsed_s=round(time.monotonic() - self.started, 2))
        return self._reply


def ask(url: str, request: dict, limit_s: float) -> Reply:
    started = time.monotonic()
    try:
        reply = _ask(url, request, limit_s)
    except Exception as exc:  # noqa: BLE001 - whatever the endpoint does, the run goes on without hints
        reply = Reply(cause=_cause(exc, limit_s), received=_body(exc))
    reply.elapsed_s = round(time.monotonic() - started, 2)
    return reply


def _ask(url: str, request: dict, limit_s: float) -> Reply:
    import openai

    key = os.environ.get(ENV_KEY, "")
    # without a key none is sent (a local server needs none); the client wants one all the same
    omit = getattr(openai, "omit", None)
    headers = {"Authorization": omit} if not key and omit is not None else None
    with openai.OpenAI(base_url=url, api_key=key or "unused", timeout=limit_s, max_retries=0) as client:
        completion = client.chat.completions.create(**request, extra_headers=headers)
    received = completion.model_dump(mode="json") if hasattr(completion, "model_dump") else str(completion)
    choices = getattr(completion, "choices", None)
    if not choices:
        return Reply(cause="malformed reply: no choices in the response", received=received)
    content = choices[0].message.content
    if not content or not content.strip():
        return Reply(cause="malformed reply: an empty message", received=received)
    return Reply(content=content, received=received)


def _timed_out(limit_s: float) -> str:
    return f"no reply within {limit_s:.1f} s (timeout)"


def _cause(exc: Exception, limit_s: float) -> str:
    """One line: why no reply can be read."""
    if isinstance(exc, ImportError):
        return f"the openai client could not be imported ({first_line(exc, 120)}); pip install 'agnitra[advisor]'"
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return _timed_out(limit_s)
    if isinstance(exc, openai.RateLimitError):
        after = exc.response.headers.get("retry-after")
        return "rate limited (HTTP 429" + (f", retry after {after} s)" if after else ")")
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        unset = f"; {ENV_KEY} is not set" if not os.environ.get(ENV_KEY) else f"; check {ENV_KEY}"
        return f"HTTP {exc.status_code}: the endpoint refused the request's credentials{unset}"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code} from the endpoint ({_message(exc)})"
    if isinstance(exc, openai.APIConnectionError):
        return f"the endpoint could not be reached ({first_line(exc.__cause__ or exc, 120)})"
    return f"malformed reply: {first_line(exc, 120)}"


def _message(exc) -> str:
    """An error body's message where it has the usual {"error": {"message": ...}}, else the error's first line."""
    body = getattr(exc, "body", None)  # the client hands the "error" object itself where there is one
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    return str(message)[:120] if message else first_line(exc, 120)


def _body(exc: Exception) -> Any:
    response = getattr(exc, "response", None)
    text = getattr(response, "text", None) if response is not None else None
    return {"error": first_line(exc, 300), "body": text[:4000] if isinstance(text, str) else None}

"""Which endpoint the advisor asks, checked before any work: an http(s) URL, a model name, the
`openai` package installed. The key is read from AGNITRA_LLM_API_KEY when the call is made."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from urllib.parse import urlparse

from agnitra.errors import UserError

ENV_KEY = "AGNITRA_LLM_API_KEY"
# the call's limit: a share of the budget, at most MAX_S; it runs beside the baseline's measurement
SHARE, MAX_S = 0.1, 30.0


@dataclass(frozen=True)
class AdvisorSettings:
    url: str  # an OpenAI-compatible endpoint's base URL, e.g. http://127.0.0.1:8000/v1
    model: str  # the model name the endpoint serves

    def limit_s(self, budget_s: float) -> float:
        return min(MAX_S, SHARE * budget_s)


def advisor_settings(url: str | None, model: str | None, strategy: str) -> AdvisorSettings | None:
    """The advisor asked for, or None; one-line user errors for what cannot work."""
    if url is None:
        if model is not None:
            raise UserError("--advisor-model: give the endpoint too, --advisor URL (e.g. http://127.0.0.1:8000/v1)")
        if strategy == "llm":
            raise UserError("--strategy llm measures the advisor's recipes first: give --advisor URL and --advisor-model NAME")
        return None
    parsed = urlparse(str(url))
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UserError(f"--advisor: {url!r} is not an http(s) URL; give the endpoint's base URL, e.g. http://127.0.0.1:8000/v1")
    if not model or not str(model).strip():
        raise UserError("--advisor needs --advisor-model NAME: the model the endpoint serves")
    if importlib.util.find_spec("openai") is None:
        raise UserError("--advisor needs the openai package: pip install 'agnitra[advisor]'")
    return AdvisorSettings(str(url).rstrip("/"), str(model).strip())

"""The LLM advisor (off by default; `--advisor URL --advisor-model NAME`): any OpenAI-compatible
endpoint is shown the workload's hotspots, op mix, device and the transforms searched here with
their parameter schemas (`prompt`), and asked for recipes as JSON. Each proposal is judged against
the registry and this run's space (`proposals`); the valid ones are measured first, by the `llm`
strategy or as warm starts of any other. The call runs beside the baseline's measurement, within
min(30 s, 10% of the budget) (`client`); a timeout, a rate limit, a malformed reply or a dead
endpoint leaves the search without hints and the report says why in one line. The request and
the reply are kept in the run folder (`advisor/prompt.json`, `advisor/reply.json`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agnitra.errors import first_line
from agnitra.fileio import atomic_write_text
from agnitra.results import CandidateResult, to_dict
from agnitra.search.advisor.client import Pending, Reply
from agnitra.search.advisor.prompt import chat_request
from agnitra.search.advisor.proposals import Proposal, judge, read_reply
from agnitra.search.advisor.settings import AdvisorSettings, advisor_settings
from agnitra.search.space import Candidate, Skipped
from agnitra.transforms.base import TransformContext

__all__ = ["Advice", "AdvisorSettings", "Asking", "Proposal", "advisor_settings"]

FOLDER = "advisor"


@dataclass
class Advice:
    """What came of asking: the proposals judged, or why there were none."""

    url: str
    model: str
    cause: str = ""  # why no hints came ('' where a reply was read)
    elapsed_s: float = 0.0
    limit_s: float = 0.0
    proposals: list[Proposal] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # in the run folder

    @property
    def candidates(self) -> list[Candidate]:
        return [p.candidate for p in self.proposals if p.candidate is not None]

    def note(self) -> str:
        """One line for the report's notes."""
        if self.cause:
            return f"advisor: no hints ({self.cause}); the search went on without them"
        valid, rejected = len(self.candidates), len(self.proposals) - len(self.candidates)
        if not valid:
            return f"advisor: {len(self.proposals)} recipe(s) proposed in {self.elapsed_s:.1f} s, none valid ({rejected} rejected, reasons in the report); the search went on without hints"
        return f"advisor: {len(self.proposals)} recipe(s) proposed in {self.elapsed_s:.1f} s, {valid} valid and measured first, {rejected} rejected (reasons in the report)"

    def to_dict(self, results: list[CandidateResult]) -> dict[str, Any]:
        """For report.json: the endpoint, the outcome and each proposal with its status after the search."""
        by_key = {r.key: r for r in results}
        return {"url": self.url, "model": self.model, "outcome": self.note(), "elapsed_s": self.elapsed_s, "limit_s": round(self.limit_s, 1),
                "files": self.files, "proposals": [_status(p, by_key) for p in self.proposals]}


def _status(proposal: Proposal, by_key: dict[str, CandidateResult]) -> dict[str, Any]:
    """rejected (why), not measured (the search ended first), passed (its speedup), failed or timeout (why)."""
    row = {"recipe": proposal.recipe, "rationale": proposal.rationale, "status": "rejected", "reason": proposal.reason, "speedup": None}
    if proposal.candidate is None:
        return row
    result = by_key.get(proposal.candidate.recipe.key())
    if result is None:
        return {**row, "status": "not measured", "reason": "the search ended before it"}
    if result.passed:
        return {**row, "status": "passed", "reason": "", "speedup": result.speedup}
    if result.status == "ok":
        error = (result.correctness.details.get("error") if result.correctness else None) or "outputs outside the tolerance"
        return {**row, "status": "failed", "reason": f"verification: {error}", "speedup": result.speedup}
    return {**row, "status": result.status, "reason": result.reason}


class Asking:
    """One run's question to the endpoint: sent when the space is known, read before the search."""

    def __init__(self, settings: AdvisorSettings, facts: Callable[[], dict[str, Any]], budget_s: float, folder: Path | None) -> None:
        self.settings, self.folder = settings, folder / FOLDER if folder is not None else None
        self.limit_s = settings.limit_s(budget_s)
        self.pending: Pending | None = None
        self.failed = ""  # why nothing was sent
        try:
            request = chat_request(settings.model, facts())
            self.files = [self._save("prompt.json", {"url": settings.url, "limit_s": round(self.limit_s, 1), "request": request})]
        except Exception as exc:  # noqa: BLE001 - the run goes on without hints
            self.files, self.failed = [], f"the prompt could not be built ({first_line(exc)})"
            return
        self.pending = Pending(settings.url, request, self.limit_s)

    def advice(self, space: list[Candidate], skipped: list[Skipped], ctx: TransformContext, searched: set[str] | None) -> Advice:
        """Waits what is left of the call's limit, then judges what came back."""
        reply = self.pending.wait() if self.pending is not None else Reply(cause=self.failed)
        advice = Advice(self.settings.url, self.settings.model, reply.cause, reply.elapsed_s, self.limit_s)
        if not reply.cause:
            raw, advice.cause = read_reply(reply.content or "")
            advice.proposals = judge(raw, space, skipped, ctx, searched) if not advice.cause else []
        self.files.append(self._save("reply.json", {"elapsed_s": reply.elapsed_s, "cause": advice.cause or None, "response": reply.received,
                                                    "proposals": [to_dict({k: v for k, v in p.__dict__.items() if k != "candidate"}) for p in advice.proposals]}))
        advice.files = [f for f in self.files if f]
        return advice

    def _save(self, name: str, doc: dict) -> str:
        if self.folder is None:
            return ""
        self.folder.mkdir(exist_ok=True)
        atomic_write_text(self.folder / name, json.dumps(doc, indent=2, default=str) + "\n")
        return f"{FOLDER}/{name}"


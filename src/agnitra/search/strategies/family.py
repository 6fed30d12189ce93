"""`FamilyGate`, around any strategy: a family of near-identical recipes (the same transforms in
the same order, other parameters: 26 fp8 and mixed-precision settings) is represented by its most
promising member, the first the strategy asks for, until one member passes verification. Once a
member fails verification, the family's other members wait until the strategy has nothing else to
propose; a member that passes opens the family again."""

from __future__ import annotations

from typing import Any

from agnitra.search.space import Candidate
from agnitra.search.strategies.warm_start import Around


def family_of(candidate: Candidate) -> tuple[str, ...]:
    return tuple(step.transform for step in candidate.recipe.steps)


class FamilyGate(Around):
    name = "family-gate"

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.failed: set[tuple[str, ...]] = set()  # families with a verification failure and no pass
        self.passed: set[tuple[str, ...]] = set()
        self.waiting: list[Candidate] = []
        self.deferred = 0

    def ask(self) -> Candidate | None:
        while (candidate := self.inner.ask()) is not None:
            family = family_of(candidate)
            if family in self.failed and family not in self.passed:
                self.waiting.append(candidate)
                self.deferred += 1
                continue
            return candidate
        return self.waiting.pop(0) if self.waiting else None

    def tell(self, candidate: Candidate, result: Any) -> None:
        family = family_of(candidate)
        if getattr(result, "passed", False):
            self.passed.add(family)
        elif getattr(result, "status", "") == "ok" and getattr(result, "correctness", None) is not None:
            self.failed.add(family)  # it ran and its outputs failed verification
        self.inner.tell(candidate, result)

    def learned_notes(self) -> list[str]:
        notes = list(self.inner.learned_notes())
        if self.deferred:
            notes.append(f"family gate: {self.deferred} candidate(s) of {len(self.failed - self.passed)} families whose first member failed verification waited until nothing else was left")
        return notes

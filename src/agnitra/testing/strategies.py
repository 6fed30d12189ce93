"""The strategy contract: what the search loop relies on of every registered strategy.

- `ask()` gives a candidate of the space it was given, or None when it is done, and None again
  after that; it never gives one candidate twice;
- `tell()` takes any result (passing, failed, timed out) without raising;
- it stops: at most as many candidates as the space holds;
- the same space (and seed) gives the same sequence.
"""

from __future__ import annotations

from agnitra.results import CandidateResult, Correctness
from agnitra.search.space import Candidate
from agnitra.search.strategies.base import Strategy

_OUTCOMES = ("passed", "failed", "timeout")


def _result(candidate: Candidate, outcome: str) -> CandidateResult:
    recipe = candidate.recipe
    status = {"passed": "ok", "failed": "failed", "timeout": "timeout"}[outcome]
    correctness = Correctness("rel_error", 0.0, True, 1e-3) if outcome == "passed" else None
    return CandidateResult(recipe.name, recipe.to_dict(), recipe.key(), candidate.prior, status, reason="" if outcome == "passed" else outcome, speedup=1.5 if outcome == "passed" else None, correctness=correctness)


def _sequence(strategy_class: type[Strategy], space: list[Candidate]) -> list[str]:
    strategy = strategy_class(list(space))
    asked = []
    for i in range(len(space) + 1):
        candidate = strategy.ask()
        if candidate is None:
            assert strategy.ask() is None, f"{strategy_class.name}: ask() gave a candidate after saying it was done"
            return asked
        assert candidate in space, f"{strategy_class.name}: ask() gave {candidate.recipe.name}, which is not in its space"
        assert candidate.recipe.key() not in asked, f"{strategy_class.name}: ask() gave {candidate.recipe.name} twice"
        asked.append(candidate.recipe.key())
        strategy.tell(candidate, _result(candidate, _OUTCOMES[i % len(_OUTCOMES)]))
    raise AssertionError(f"{strategy_class.name}: ask() did not stop within the {len(space)} candidates of its space")


def check_strategy(strategy_class: type[Strategy], space: list[Candidate]) -> list[str]:
    """Run the contract on one strategy over `space`; returns the recipe keys it asked for."""
    first = _sequence(strategy_class, space)
    assert _sequence(strategy_class, space) == first, f"{strategy_class.name}: the same space gave another sequence"
    assert _sequence(strategy_class, []) == [], f"{strategy_class.name}: an empty space must give nothing"
    return first

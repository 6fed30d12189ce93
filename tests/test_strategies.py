"""What the strategies choose beyond the contract: auto's pick, and NSGA-II's error scale."""

from __future__ import annotations

import pytest

from agnitra.results import Correctness
from agnitra.search.space import Candidate
from agnitra.search.strategies.auto import Auto
from agnitra.search.strategies.enumerate import Enumerate
from agnitra.search.strategies.nsga2 import quality_error
from agnitra.transforms.recipe import Recipe


def _space(n: int) -> list[Candidate]:
    return [Candidate(Recipe.parse(f"threads(count={i + 1})"), prior=1.0) for i in range(n)]


def test_auto_orders_lossless_first_until_a_cost_model_trains_and_continues_past_its_stop_rule():
    from agnitra.search.strategies.family import FamilyGate

    auto = Auto(_space(40))
    assert isinstance(auto.chosen, FamilyGate) and isinstance(auto.chosen.inner, Enumerate) and not auto.guided

    class Stopped(Enumerate):
        def ask(self):
            return None

        def stop_note(self):
            return "model: stopped: no open candidate is expected to gain 0.2%"

    auto.chosen, auto.guided = FamilyGate(Stopped(_space(3))), True
    assert auto.ask() is not None and auto.stop_note() == ""  # the rest of the space follows the model's stop
    assert auto.learned_notes()[-1].endswith("the budget left went to the other candidates, lossless first")


@pytest.mark.parametrize("metric,value,error", [("cosine", 0.99, 0.01), ("top1", 0.9, 0.1), ("logits", 20.0, 0.01), ("rel_error", 0.003, 0.003), ("perplexity", 0.02, 0.02)])
def test_nsga2_reads_every_check_as_an_error_to_minimise(metric, value, error):
    assert quality_error(Correctness(metric, value, True, None)) == pytest.approx(error)


def test_warm_start_measures_the_recommended_first_whatever_the_strategy_then_never_twice():
    from agnitra.search.strategies.random_order import RandomOrder
    from agnitra.search.strategies.warm_start import WarmStart
    from agnitra.testing.strategies import _result

    space = _space(12)
    first = [space[7], space[3]]
    strategy = WarmStart(first, RandomOrder(space, seed=1))
    asked = []
    while (candidate := strategy.ask()) is not None:
        asked.append(candidate.recipe.key())
        strategy.tell(candidate, _result(candidate, "passed"))
    assert asked[:2] == [space[7].recipe.key(), space[3].recipe.key()]
    assert sorted(asked) == sorted(c.recipe.key() for c in space)  # every candidate once


def test_a_strategy_around_another_passes_on_what_the_inner_one_learned():
    """The report's notes of what the search learned (the model's sensitivity shift) come through
    the wrappers optimize puts around it (the recommended first, the peers observed)."""
    from agnitra.search.strategies.random_order import RandomOrder
    from agnitra.search.strategies.warm_start import WarmStart

    inner = RandomOrder(_space(3), seed=1)
    inner.learned_notes = lambda: ["model: lossy recipes err 5x what the cost model predicted"]
    assert WarmStart([], inner).learned_notes() == ["model: lossy recipes err 5x what the cost model predicted"]

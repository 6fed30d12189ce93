"""What the strategies choose beyond the contract: auto's pick, and NSGA-II's error scale."""

from __future__ import annotations

import pytest

from agnitra.results import Correctness
from agnitra.search.space import Candidate
from agnitra.search.strategies.auto import ENUMERATE_UP_TO, Auto
from agnitra.search.strategies.enumerate import Enumerate
from agnitra.search.strategies.nsga2 import quality_error
from agnitra.search.strategies.tpe import TPE
from agnitra.transforms.recipe import Recipe


def _space(n: int) -> list[Candidate]:
    return [Candidate(Recipe.parse(f"threads(count={i + 1})"), prior=1.0) for i in range(n)]


def test_auto_enumerates_small_spaces_and_uses_tpe_on_large_ones():
    assert isinstance(Auto(_space(ENUMERATE_UP_TO)).chosen, Enumerate)
    assert isinstance(Auto(_space(ENUMERATE_UP_TO + 1)).chosen, TPE)


@pytest.mark.parametrize("metric,value,error", [("cosine", 0.99, 0.01), ("top1", 0.9, 0.1), ("logits", 20.0, 0.01), ("rel_error", 0.003, 0.003), ("perplexity", 0.02, 0.02)])
def test_nsga2_reads_every_check_as_an_error_to_minimise(metric, value, error):
    assert quality_error(Correctness(metric, value, True, None)) == pytest.approx(error)

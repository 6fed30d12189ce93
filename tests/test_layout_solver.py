"""The layout solver (`transforms.permutation.solver`): on planted structure it finds the order a
transform loses least on; on any input it returns a permutation no worse than the identity, within
its time cap, with the best order it saw."""

from __future__ import annotations

import torch

from agnitra.transforms.permutation.costs import Blocks, GroupQuant, TwoFour, total_cost
from agnitra.transforms.permutation.solver import solve


def _is_permutation(order: torch.Tensor, n: int) -> bool:
    return sorted(order.tolist()) == list(range(n))


def test_two_four_finds_complementary_channels():
    """Each run of four channels is large on the same rows (even rows, then odd ones): grouped as
    given, 2:4 drops half the large weights; with two channels of each kind in every group it
    drops none."""
    rows, channels = 64, 64
    importance = torch.full((rows, channels), 0.01)
    for c in range(channels):
        importance[(c // 4) % 2::2, c] = 1.0
    cost = TwoFour(importance)
    solution = solve(cost, seconds=3, seed=0)
    assert _is_permutation(solution.order, channels)
    assert solution.cost <= solution.identity_cost
    assert solution.cost == total_cost(cost, solution.order)
    assert solution.gain > 0.9, solution  # nearly everything large kept


def test_group_quant_puts_channels_of_one_range_together():
    """Channels alternate between a large and a small range: a group scale set by a large channel
    rounds the small ones coarsely; sorted into groups of one range, the error falls."""
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(32, 128, generator=generator) * torch.tensor([10.0, 0.1]).repeat(64)
    cost = GroupQuant(weights, group=16, bits=4)
    solution = solve(cost, seconds=3)
    by_range = torch.argsort(torch.tensor([10.0, 0.1]).repeat(64), stable=True)  # the planted split: one range per group
    assert _is_permutation(solution.order, 128) and solution.cost <= total_cost(cost, by_range) and solution.gain > 0.2, solution


def test_blocks_and_any_input_are_never_worse_than_the_identity_and_keep_the_best():
    importance = torch.rand(48, 96, generator=torch.Generator().manual_seed(1))
    for cost in (Blocks(importance, group=16, rows=16, density=0.5), TwoFour(importance), GroupQuant(importance - 0.5, group=32)):
        solution = solve(cost, seconds=1)
        assert _is_permutation(solution.order, 96)
        assert solution.cost <= solution.identity_cost + 1e-9
        costs = [c for _, c in solution.history]
        assert costs == sorted(costs, reverse=True) and abs(costs[-1] - solution.cost) < 1e-6 * max(1.0, solution.cost)


def test_the_time_cap_ends_the_search_with_the_best_so_far():
    importance = torch.rand(256, 512, generator=torch.Generator().manual_seed(2))
    solution = solve(TwoFour(importance), seconds=0.5)
    assert _is_permutation(solution.order, 512) and solution.seconds < 15  # the seeds, then at most the cap
    assert solution.cost <= solution.identity_cost


def test_channels_that_do_not_fill_groups_are_refused():
    import pytest

    with pytest.raises(ValueError, match="do not split into groups of 4"):
        solve(TwoFour(torch.rand(4, 10)), seconds=0.1)

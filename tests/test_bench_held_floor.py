"""benchmarks/held_floor.py: its read-only kernel (pre-wait reads held, x read after the wait) sums what
torch sums, so the floor it times reads every word once; and its families stay within their bounds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import held_floor  # noqa: E402 - benchmarks/ is not a package


@pytest.mark.parametrize("split,held", [(1, 0), (1, 2), (2, 1), (2, 2), (4, 1)])
def test_held_pass_sums_every_word_once_whatever_it_holds(split, held):
    """Rows not a multiple of the block (40 rows, blocks of 16), spans split 1-4 ways, none, some or all
    of a span's steps held: the splits' sums add up to each row's xor with x summed (int32 wrapping)."""
    passes = held_floor.HeldPass(40, 512 * 4, torch.device("cpu"), None, max_split=4)
    cfg = {"BLOCK_N": 16, "BLOCK_W": 128 // split, "SPLIT": split, "num_warps": 1, "STAGES": 1, "HELD": held}
    assert passes.check(cfg)
    assert passes.check({**cfg, "num_warps": 2})


def test_held_pass_with_a_tail_still_sums_every_word_once():
    """TAIL dependent reads of the chase buffer before the store add nothing to the sums (every link is zero),
    held or not; a chase buffer that is not zero would show in them."""
    passes = held_floor.HeldPass(40, 512 * 4, torch.device("cpu"), None, max_split=2)
    for held in (0, 1, 4):
        assert passes.check({"BLOCK_N": 16, "BLOCK_W": 64, "SPLIT": 2, "num_warps": 1, "STAGES": 1, "HELD": held, "TAIL": 3})
    passes.chase.fill_(1)
    assert not passes.check({"BLOCK_N": 16, "BLOCK_W": 64, "SPLIT": 2, "num_warps": 1, "STAGES": 1, "HELD": 1, "TAIL": 1})


def test_held_families_hold_within_the_register_budget_and_split_evenly():
    for words, family in ((512, held_floor.family(512)), (1792, held_floor.family(1792)), (512, held_floor.family(512, **held_floor.GEMV_LIKE))):
        assert family
        for cfg in family:
            assert cfg["steps"] * cfg["BLOCK_W"] * cfg["SPLIT"] == words
            assert 0 <= cfg["HELD"] <= cfg["steps"]
            assert cfg["HELD"] * cfg["BLOCK_N"] * cfg["BLOCK_W"] <= held_floor.HELD_REGISTERS * 32 * cfg["num_warps"]
        assert {c["HELD"] for c in family} >= {0, 1}
    assert held_floor.held_steps(8) == [0, 1, 4, 8] and held_floor.held_steps(1) == [0, 1]

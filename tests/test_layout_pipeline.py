"""The layout pipeline (`agnitra.relayout`, `agnitra.layout()`): state transforms applied to a copy in modes none / once
/ iterative; a permutation that changes the outputs is rolled back with a note; a re-permutation
after 2:4 moves whole fours, so the 2:4 pattern survives a later quantisation's new order."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agnitra.errors import UserError
from agnitra.relayout import pipeline
from agnitra.relayout.pipeline import run_layout
from agnitra.transforms.permutation.steps import parse_steps


def _planted() -> tuple[nn.Module, list[tuple]]:
    """An MLP whose second layer's runs of four hidden units are large on the same output rows:
    2:4 as given drops half the large weights, a permutation of the hidden units none."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    with torch.no_grad():
        down = torch.full((16, 64), 0.01)
        for c in range(64):
            down[(c // 4) % 2::2, c] = 1.0
        model[2].weight.copy_(down * torch.sign(torch.randn(16, 64)))
    calibration = [(torch.randn(8, 32, generator=torch.Generator().manual_seed(i)),) for i in range(2)]
    return model, calibration


def test_iterative_keeps_more_than_none_and_leaves_the_model_alone():
    model, calibration = _planted()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    steps = parse_steps("sparsity:2:4")
    none, iterative = (run_layout(model, calibration, steps, mode, solve_seconds=3) for mode in ("none", "iterative"))
    assert none.steps[0].permuted_spaces == 0 and iterative.steps[0].permuted_spaces >= 1
    assert iterative.steps[0].importance_kept > none.steps[0].importance_kept + 0.05, (none.steps, iterative.steps)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "4.weight" not in {f"{n}.weight" for n in pipeline.targets(iterative.model, pipeline.find_spaces(model, calibration[0]), steps[0])}  # the head is left alone


def test_a_later_permutation_moves_whole_fours_so_the_2_4_pattern_holds():
    model, calibration = _planted()
    run = run_layout(model, calibration, parse_steps("sparsity:2:4,quant:int4:g32"), "iterative", solve_seconds=2)
    for layer in (run.model[0], run.model[2]):
        fours = layer.weight.detach().reshape(layer.weight.shape[0], -1, 4)
        assert int((fours != 0).sum(-1).max()) <= 2  # still 2 of every 4 after the quantisation's order


def test_a_permutation_that_changes_the_outputs_is_rolled_back(monkeypatch):
    model, calibration = _planted()

    from agnitra.transforms.permutation import order

    def broken(model, spaces, chosen, in_place=True):  # moves one side of the hidden layer only
        with torch.no_grad():
            model[2].weight.copy_(model[2].weight.flip(1))
        return 1

    monkeypatch.setattr(order, "permute_weights", broken)
    none = run_layout(model, calibration, parse_steps("sparsity:2:4"), "none")
    run = run_layout(model, calibration, parse_steps("sparsity:2:4"), "iterative", solve_seconds=1)
    assert run.steps[0].permuted_spaces == 0 and any("rolled back" in n for n in run.steps[0].notes)
    assert all(torch.equal(a, b) for a, b in zip(run.model.state_dict().values(), none.model.state_dict().values()))


@pytest.mark.parametrize("text, fragment", [
    ("sparsity:1:4", "not a state transform"), ("quant:int4:32", "written gN"), ("blocks:16:2", "DENSITY between 0 and 1"), (" , ", "names no state transform"),
])
def test_state_transforms_are_parsed_or_refused_in_one_line(text, fragment):
    with pytest.raises(UserError, match=fragment) as info:
        parse_steps(text)
    assert "\n" not in str(info.value)


def test_a_given_model_is_measured_and_judged_beside_the_original():
    import copy

    from agnitra.api import benchmark
    from agnitra.bench.variants.given import GivenModel

    model, calibration = _planted()
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken[0].weight.zero_()
    report = benchmark(model, calibration[0], variants=["eager", GivenModel("same", copy.deepcopy(model)), GivenModel("broken", broken)],
                       device="cpu", runs=2, warmup=0, op_breakdown=False, store=False)
    by_name = {v.name: v for v in report.variants}
    assert by_name["same"].correctness.passed and not by_name["broken"].correctness.passed


def test_agnitra_layout_compares_the_modes_and_writes_its_files(tmp_path):
    import json

    import agnitra
    from agnitra.cli import main

    model, calibration = _planted()
    doc = agnitra.layout(model, calibration[0], transforms="sparsity:2:4", device="cpu", solve_seconds=2, runs=2, out=tmp_path / "sdk")
    modes = {m["mode"]: m for m in doc["modes"]}
    assert list(modes) == ["none", "once", "iterative"] and all(m["quality"]["metric"] for m in modes.values())
    assert modes["iterative"]["steps"][0]["importance_kept"] > modes["none"]["steps"][0]["importance_kept"]
    assert json.loads((tmp_path / "sdk" / "layout.json").read_text())["schema"] == "agnitra.layout/1"
    assert doc["calibration"] == "8 batch(es) of [8, 32] from the example inputs and fresh inputs like them"
    assert (tmp_path / "sdk" / "layout.csv").read_text().count("\n") == 4  # a header and a row per mode and step
    (tmp_path / "m.py").write_text("import torch\n\ndef make():\n    torch.manual_seed(0)\n    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)), (torch.randn(4, 16),)\n")
    assert main(["layout", f"{tmp_path}/m.py:make", "--device", "cpu", "--transform", "quant:int4:g16", "--modes", "none,iterative", "--solve-seconds", "1",
                 "--runs", "2", "--out", str(tmp_path / "cli")]) == 0
    assert [m["mode"] for m in json.loads((tmp_path / "cli" / "layout.json").read_text())["modes"]] == ["none", "iterative"]
    assert main(["layout", f"{tmp_path}/m.py:make", "--modes", "sideways"]) == 2


def test_permutations_are_cached_reused_and_invalidated(tmp_path, monkeypatch):
    import agnitra._version
    from agnitra.transforms.permutation.cache import PermutationCache

    model, calibration = _planted()
    steps = parse_steps("sparsity:2:4")
    cache = PermutationCache(tmp_path / "layout")
    first = run_layout(model, calibration, steps, "iterative", solve_seconds=2, cache=cache)
    assert len(list((tmp_path / "layout").glob("*.json"))) == 1
    again = run_layout(model, calibration, steps, "iterative", solve_seconds=2, cache=cache)
    assert any("were reused" in n for n in again.steps[0].notes)
    assert all(torch.equal(a, b) for a, b in zip(first.model.state_dict().values(), again.model.state_dict().values()))
    assert again.steps[0].solver_gain == first.steps[0].solver_gain
    other_inputs = run_layout(model, calibration[::-1], steps, "iterative", solve_seconds=1, cache=cache)  # other activation norms: solved again
    assert not any("reused" in n for n in other_inputs.steps[0].notes) and len(list((tmp_path / "layout").glob("*.json"))) == 2
    monkeypatch.setattr(agnitra._version, "__version__", "99.0")  # another version of Agnitra: solved again
    newer = run_layout(model, calibration, steps, "iterative", solve_seconds=1, cache=cache)
    assert not any("reused" in n for n in newer.steps[0].notes) and len(list((tmp_path / "layout").glob("*.json"))) == 3
    for path in (tmp_path / "layout").glob("*.json"):
        path.write_text("{not json")
    damaged = run_layout(model, calibration, steps, "iterative", solve_seconds=1, cache=cache)
    assert any("were damaged" in n and "set aside" in n for n in damaged.steps[0].notes)


def test_a_decoder_is_calibrated_on_its_training_text_never_its_held_out_text():
    """tinylm-py's calibration batches are training-corpus windows in prefill form; the held-out
    windows it is judged on never appear among them."""
    from agnitra.api import prepare_workload
    from agnitra.models.pycorpus import read_corpus, window
    from agnitra.workloads.zoo.tinylm_py import CALIBRATION_WINDOWS

    workload, _ = prepare_workload("zoo:tinylm-py", device="cpu")
    batches = workload.calibration_inputs(3)
    length = workload.decoder.max_seq_len
    assert [tuple(t.shape) for t in batches[0]] == [(1, length), (length,)]
    train = read_corpus("train").tokens
    for i, (tokens, positions) in enumerate(batches):
        assert torch.equal(tokens[0], window(train, i, length, CALIBRATION_WINDOWS)) and torch.equal(positions, torch.arange(length))
    held_out = {tuple(workload.text_windows(i)[0][0, :32].tolist()) for i in range(8)}
    assert not held_out & {tuple(tokens[0, :32].tolist()) for tokens, _ in batches}
    logits = workload.model(*batches[0])
    assert logits.shape[:2] == (1, length) and torch.isfinite(logits).all()

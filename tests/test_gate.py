"""`agnitra check`: the release gate passes a model measured again as its baseline report says, and
fails in one line (exit 1) on a latency regression or a quality drop; a baseline from another device
or a file that is no report is a user error (exit 2)."""

from __future__ import annotations

import json
import textwrap

import pytest

from agnitra.cli import main

FACTORY = textwrap.dedent('''
    import torch

    def build(batch: int = 4):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
        return model, (torch.randn(batch, 64),)
''')


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """One bench report with a recipe row, made once (the tests change copies of it). One thread:
    with all cores, the other xdist worker's load made a re-measure 240x slower (OpenMP waits)."""
    folder = tmp_path_factory.mktemp("gate")
    (folder / "m.py").write_text(FACTORY)
    import os

    here = os.getcwd()
    os.chdir(folder)
    try:
        assert main(["bench", "m.py:build", "--device", "cpu", "--variants", "eager", "--recipe", "threads(count=1)", "--runs", "20", "--no-ops", "--out", "base"]) == 0
    finally:
        os.chdir(here)
    return folder, json.loads((folder / "base" / "report.json").read_text())


def _check(folder, doc, capsys, *extra):
    (folder / "baseline.json").write_text(json.dumps(doc))
    code = main(["check", str(folder / "m.py") + ":build", "--baseline", str(folder / "baseline.json"), "--variant", "recipe: threads(count=1)",
                 "--device", "cpu", "--runs", "20", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _row(doc):
    return next(v for v in doc["variants"] if v["name"].startswith("recipe: "))


def test_the_same_model_passes_against_its_own_report(baseline, capsys):
    folder, doc = baseline
    code, out, err = _check(folder, doc, capsys, "--max-latency-regression", "300%")  # this 2-core VM's timing moves between runs
    assert code == 0, err
    assert "check passed: no regression" in out


def test_a_latency_regression_fails_in_one_line(baseline, capsys):
    folder, doc = baseline
    faster = json.loads(json.dumps(doc))
    _row(faster)["latency_ms"]["median"] = 1e-4  # the baseline claims 0.1 us a call: no Python call of a model runs that fast, however loaded the machine was when the baseline was made
    code, out, err = _check(folder, faster, capsys)
    lines = err.strip().splitlines()
    assert code == 1 and lines[-1].startswith("check failed: latency regressed +") and "allowed 10%" in lines[-1]


def test_a_quality_drop_fails(baseline, capsys):
    folder, doc = baseline
    better = json.loads(json.dumps(doc))
    _row(better)["correctness"]["value"] = -0.5  # a relative error below zero: no real model matches it
    code, out, err = _check(folder, better, capsys, "--max-latency-regression", "300%")
    assert code == 1 and "quality dropped" in err.strip().splitlines()[-1]


@pytest.mark.parametrize("change, fragment", [
    ({"device": {"name": "NVIDIA H100", "kind": "cuda", "signature": {}, "ceilings": {}}}, "the baseline was measured on NVIDIA H100"),
    ({"schema": "something/1"}, "is not an optimize or bench report"),
])
def test_a_baseline_that_does_not_fit_is_a_user_error(baseline, capsys, change, fragment):
    folder, doc = baseline
    code, out, err = _check(folder, {**doc, **change}, capsys)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1

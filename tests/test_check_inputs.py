"""The user's own check inputs (`--check-inputs FILE`, `check_inputs=`): verification runs on them,
the report names them, and a file that does not fit is one line, read without running its code."""

from __future__ import annotations

import json
import pickle
import textwrap

import numpy as np
import pytest
import torch

import agnitra
from agnitra.cli import main
from agnitra.errors import UserError
from seeded_cache import seeded_cache

FACTORY = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.lin(x)

    def build(batch: int = 2):
        torch.manual_seed(0)
        return Model(), (torch.randn(batch, 8),)
''')


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(FACTORY)
    return "m.py:build"


def _bench(argv, capsys):
    code = main(["bench", *argv, "--device", "cpu", "--variants", "eager", "--runs", "2", "--warmup", "0", "--no-ops", "--json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_check_inputs_replace_the_held_out_sets_and_are_named(model_file, tmp_path, capsys):
    torch.save((torch.randn(10, 8),), tmp_path / "check.pt")
    code, out, err = _bench([model_file, "--check-inputs", "check.pt"], capsys)
    assert code == 0, err
    verification = json.loads(out)["conditions"]["verification"]
    assert verification["held_out"] == "check.pt (5 batches)"
    assert set(verification["exploring"]) == {"sign-flipped", "scaled x4", "zeros", "wide"}
    assert verification["behaviour"].startswith("none found")


def test_npz_check_inputs(model_file, tmp_path, capsys):
    np.savez(tmp_path / "check.npz", np.random.randn(4, 8).astype(np.float32))
    code, out, err = _bench([model_file, "--check-inputs", "check.npz"], capsys)
    assert code == 0, err
    assert json.loads(out)["conditions"]["verification"]["held_out"] == "check.npz (2 batches)"


class _RunsCode:
    def __reduce__(self):
        return (print, ("code from the check file ran",))


@pytest.mark.parametrize("name, content, fragment", [
    ("wide.pt", (torch.randn(10, 7),), "input 0 has shape (10, 7); the model's example input 0 is (2, 8)"),
    ("ints.pt", (torch.ones(10, 8, dtype=torch.int64),), "input 0 is int64; the model takes floating-point values there"),
    ("two.pt", (torch.randn(10, 8), torch.randn(10, 8)), "holds 2 tensor(s) but the model takes 1 input(s)"),
    ("dict.pt", {"x": torch.randn(10, 8)}, "holds dict, not tensors"),
    ("code.pt", _RunsCode(), "cannot be read as tensors"),
    ("missing.pt", None, "no such file"),
    ("data.csv", "", "unsupported file type '.csv'"),
])
def test_a_check_file_that_does_not_fit_is_one_line(model_file, tmp_path, capsys, name, content, fragment):
    if isinstance(content, str):
        (tmp_path / name).write_text(content)
    elif isinstance(content, _RunsCode):
        (tmp_path / name).write_bytes(pickle.dumps(content))
    elif content is not None:
        torch.save(content, tmp_path / name)
    code, out, err = _bench([model_file, "--check-inputs", name], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert "code from the check file ran" not in out + err


def test_sdk_check_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    model = torch.nn.Linear(8, 4)
    report = agnitra.benchmark(model, (torch.randn(2, 8),), device="cpu", runs=2, warmup=0, op_breakdown=False, check_inputs=(torch.randn(6, 8),))
    assert report.conditions["verification"]["held_out"] == "check_inputs given in Python (3 batches)"
    with pytest.raises(UserError, match="holds 1 tensor"):
        agnitra.benchmark(torch.nn.Bilinear(8, 8, 4), (torch.randn(2, 8), torch.randn(2, 8)), device="cpu", check_inputs=torch.randn(6, 8))


def test_the_reports_list_what_verification_checked(model_file, tmp_path, capsys):
    code = main(["bench", model_file, "--device", "cpu", "--variants", "eager", "--runs", "2", "--warmup", "0", "--no-ops", "--out", "run"])
    out = capsys.readouterr().out
    assert code == 0
    flat = " ".join(out.split())
    assert "exploring inputs: sign-flipped, scaled x4, zeros, wide" in flat and "other shape: batch 3" in flat
    page = (tmp_path / "run" / "report.html").read_text()
    assert "What verification checked" in page and "exploring.sign-flipped" in page and "behaviour" in page

"""Recipes are read strictly, and agnitra.load applies only the recipe a run chose to its model.

Inline recipes: `name` or `name(key=value,...)` joined by single `+`; a step that is anything else
is a one-line UserError naming the step, the problem and what the transform takes (the bug this
replaces: `compile(max-autotune)` ran as compile with its default mode). recipe.json: version and
steps only, each key once. load: recipe.json must match the chosen recipe recorded in report.json
and agnitra.json, and the model must be the one the run was made for.
"""

from __future__ import annotations

import json

import pytest
import torch

import agnitra
from agnitra.cli import main
from agnitra.errors import UserError
from agnitra.optimized import OptimizedModel
from agnitra.transforms.recipe import Recipe
from agnitra.workloads.prepare import prepare_workload


@pytest.mark.parametrize(
    "text, message",
    [
        ("compile(max-autotune)", "recipe step 'compile(max-autotune)': 'max-autotune' is not key=value; compile takes mode, freezing, pdl"),
        ("compile(mode=)", "recipe step 'compile(mode=)': mode= has no value"),
        ("compile(mode=fast)", "compile mode must be one of default, max-autotune"),
        ("nosuch", "unknown transform 'nosuch'"),
        ("precision + + compile", "step 2 is empty; join steps with one +"),
        ("compile +", "step 2 is empty"),
        ("+ compile", "step 1 is empty"),
        ("", "empty recipe"),
        ("compile(mode=max-autotune,mode=default)", "mode is given twice"),
        ("compile()", "empty parentheses"),
        ("compile(mode=default", "cannot read recipe step 'compile(mode=default'"),
        ("compile(mode=default,)", "'' is not key=value"),
        ("compile(freezing=yes)", "parameter freezing='yes' should be bool"),
        ("compile(bits=3)", "has no parameter(s) bits"),
        ("threads(count=true)", "parameter count=True should be int"),
        ("precision(dtype=fp8)", "precision dtype must be one of bf16, fp16"),
        ("int4-weight-only(group_size=7)", "group_size must be one of 32, 64, 128, 256"),
        ("threads(count=-1)", "threads count must be 0 (physical cores) or more, not -1"),
        ("onnxruntime(threads=-2)", "onnxruntime threads must be 0 (torch's count) or more, not -2"),
        ("cuda-graphs(warmup=0)", "CUDA-graph capture needs at least one warm-up call"),
        ("triton-kernels(weights=int3)", "weights must be one of keep, int8, int4, not 'int3'"),
    ],
)
def test_malformed_inline_recipes_are_refused_in_one_line(text, message):
    with pytest.raises(UserError) as info:
        Recipe.parse(text)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1, str(info.value)


def test_max_autotune_is_kept_when_written_as_key_value():
    assert Recipe.parse("compile(mode=max-autotune)").steps[0].params["mode"] == "max-autotune"


def test_a_value_holding_commas_is_quoted_and_reads_back():
    recipe = Recipe.parse("int8-weight-only(skip='output,lm_head') + compile(mode=reduce-overhead)")
    assert recipe.steps[0].params["skip"] == "output,lm_head"
    assert Recipe.parse(recipe.name) == recipe


def test_a_malformed_recipe_through_the_cli_exits_2(capsys):
    code = main(["bench", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--recipe", "compile(max-autotune)"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "is not key=value" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"version": "agnitra.recipe/1", "steps": [], "steps": []}', "gives steps twice"),
        ('{"version": "agnitra.recipe/1", "steps": [], "note": "x"}', "it holds note"),
        ('{"version": "agnitra.recipe/1", "steps": [{"transform": "compile", "params": "fast"}]}', "must be key=value pairs"),
        ('{"version": "agnitra.recipe/1", "steps": [{"transform": "compile", "mode": "fast"}]}', "recipe step 1 is not"),
        ('{"version": "agnitra.recipe/1", "steps": [{"transform": "compile", "params": {"mode": "fast"}}]}', "compile mode must be one of"),
    ],
)
def test_recipe_files_are_read_strictly(tmp_path, content, message):
    path = tmp_path / "recipe.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        Recipe.load(path)


# --- agnitra.load checks the recipe against the run -----------------------------------------


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


INPUTS = (torch.randn(2, 8),)
CHOSEN = Recipe.of(("precision", {"dtype": "bf16"}))


@pytest.fixture
def run(tmp_path):
    """A run folder as optimize leaves it: recipe.json, agnitra.json and report.json's chosen recipe."""
    workload, _ = prepare_workload(_model(), INPUTS, device="cpu")
    OptimizedModel(workload.model, CHOSEN, workload).save(tmp_path)
    (tmp_path / "report.json").write_text(json.dumps({"chosen": CHOSEN.name, "recipe": CHOSEN.to_dict()}))
    return tmp_path


def _tamper(path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _refused(run, match: str, model=None, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        agnitra.load(run, model if model is not None else _model(), INPUTS, device="cpu", **kwargs)
    message = str(info.value)
    assert match in message and len(message.splitlines()) == 1, message
    return message


def test_load_applies_the_recipe_the_run_chose(run):
    loaded = agnitra.load(run, _model(), INPUTS, device="cpu")
    assert loaded.recipe == CHOSEN
    with torch.no_grad():
        torch.testing.assert_close(loaded(*INPUTS), _model()(*INPUTS), rtol=0.05, atol=0.05)


def test_load_refuses_a_tampered_recipe(run):
    _tamper(run / "recipe.json", lambda doc: doc["steps"][0]["params"].update(dtype="fp16"))
    message = _refused(run, "is not the recipe the run chose (precision(dtype=bf16)")
    assert "precision(dtype=fp16)" in message and "re-run agnitra optimize" in message


def test_load_refuses_a_recipe_the_report_does_not_record(run):
    _tamper(run / "agnitra.json", lambda doc: doc.pop("recipe"))
    _tamper(run / "recipe.json", lambda doc: doc["steps"].append({"transform": "compile", "params": {}}))
    _refused(run, "in report.json")


def test_load_refuses_an_added_step_recorded_nowhere(run):
    (run / "report.json").unlink()
    _tamper(run / "recipe.json", lambda doc: doc["steps"].clear())
    _refused(run, "in agnitra.json")


def test_load_refuses_another_model(run):
    other = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    message = _refused(run, "was optimized for Sequential (float32, 280 parameters), not this model", model=other)
    assert "pass the model it was made for" in message


def test_load_refuses_another_dtype(run):
    _refused(run, "dtype float32 vs bfloat16", dtype="bf16")


def test_load_refuses_a_folder_that_is_no_run(tmp_path):
    CHOSEN.save(tmp_path / "recipe.json")
    _refused(tmp_path, "has no agnitra.json")


def test_apply_is_a_public_verb_that_leaves_the_model_alone():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).train()
    x = torch.randn(3, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fast = agnitra.apply(model, "precision(dtype=bf16)", (x,), device="cpu")
    assert fast.recipe == Recipe.parse("precision(dtype=bf16)")
    assert fast(x).dtype == torch.float32 and torch.allclose(fast(x), model.eval()(x), rtol=0.05, atol=0.05)
    assert all(torch.equal(before[k], v) and v.dtype == torch.float32 for k, v in model.state_dict().items())
    with pytest.raises(UserError, match="unknown transform 'nosuch'"):
        agnitra.apply(model, "nosuch", (x,), device="cpu")

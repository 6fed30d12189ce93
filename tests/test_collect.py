"""The generated family builds what its names say, the collector measures a designed sample into
the store, and the dataset comes out with the features the cost model reads."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from agnitra.cli import main
from agnitra.search.collect import PlanEntry, default_plan, designed_sample
from agnitra.search.space import Candidate
from agnitra.transforms.recipe import Recipe, Step
from agnitra.workloads import generated
from agnitra.workloads.registry import BuildOptions


@pytest.mark.parametrize("name, params", [("gen:mlp-w32-d2", 2 * (32 * 128 + 128 + 128 * 32 + 32 + 64) + 32 * 100 + 100),
                                          ("gen:conv-c4-d2-r16", None), ("gen:tfm-d32-l1-h2", None)])
def test_a_generated_name_builds_the_model_it_describes(name, params):
    workload = generated.build(name, BuildOptions(batch=3))
    out = workload.model(*workload.example_inputs)
    assert out.shape[0] == 3 and torch.isfinite(out).all()
    assert workload.weights == "random" and workload.source == name and workload.hints["family"] == name.split("-")[0]
    if params is not None:
        assert workload.param_count() == params
    again = generated.build(name, BuildOptions(batch=3))
    assert all(torch.equal(a, b) for a, b in zip(workload.model.state_dict().values(), again.model.state_dict().values()))  # seeded


@pytest.mark.parametrize("name, message", [
    ("gen:mlp-w32", "not a generated workload name"),
    ("gen:tfm-d30-l1-h4", "does not split into 4 heads"),
    ("gen:conv-c4-d2-r4", "resolution 4 is outside"),
    ("gen:mlp-w99999-d1", "width 99999 is outside"),
    ("gen:lm-d96-l1-h32", "is odd (rotary embeddings need pairs)"),
])
def test_a_bad_generated_name_is_one_line(name, message, capsys):
    assert main(["bench", name, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_designed_sample_of_names_spreads_over_families_and_parses():
    names = generated.designed_sample(12, seed=3)
    assert len(names) >= 10 and {generated.family(n) for n in names} == {"gen:mlp", "gen:conv", "gen:tfm"}
    assert all(generated.parse(n) for n in names)
    assert generated.designed_sample(12, seed=3) == names


def test_a_generated_decoder_is_a_decode_step_with_its_cache_and_config():
    workload = generated.build("gen:lm-d64-l2-h4", BuildOptions(batch=2, tokens=5))
    config = workload.hints["config"]
    assert (config["dim"], config["n_layers"], config["n_heads"], config["n_kv_heads"], config["ffn_dim"]) == (64, 2, 4, 1, 192)
    assert workload.decoder.max_new_tokens == 5 and workload.decoder.batch == 2 and workload.hints["family"] == "gen:lm"
    tokens, position = workload.example_inputs
    assert tokens.shape == (2, 1) and position.tolist() == [workload.decoder.prompt_len]
    logits = workload.model(*workload.example_inputs)
    assert logits.shape[-1] == generated.DECODER_VOCAB and torch.isfinite(logits).all()
    assert generated.family("gen:lm-d64-l2-h4") == "gen:lm"


def test_a_plan_of_decoders_collects_decode_steps():
    plan = default_plan("cuda", 4, families=("lm",), zoo=False)
    assert len(plan) == 4 and all(e.spec.startswith("gen:lm-") and e.tokens == 32 for e in plan)
    assert {e.batch for e in plan} == {1, 8} and "tokens=32" in plan[0].label()
    assert all(e.spec.startswith("gen:") for e in default_plan("cuda", 3, zoo=False)) and not any(e.tokens for e in default_plan("cuda", 3))
    assert main(["collect", "--plan", "--families", "lm,rnn"]) == 2


def _candidate(*names: str) -> Candidate:
    return Candidate(Recipe(tuple(Step(n) for n in names)), 1.0)


def test_the_designed_sample_sees_every_policy_once_before_any_parameter_variant():
    variants = lambda name, n: [Candidate(Recipe((Step(name, {"k": i}),)), 1.0) for i in range(n)]  # noqa: E731
    space = variants("a", 10) + [_candidate("a", "b"), *variants("b", 3), _candidate("a", "c"), _candidate("c"), _candidate("b", "c")]
    sample = designed_sample(space, 6, seed=0)
    policies = [frozenset(s.transform for s in c.recipe.steps) for c in sample]
    assert len(sample) == 6 and len(set(policies)) == 6  # six sets of transforms: each once, no second setting of "a"
    longer = designed_sample(space, 9, seed=0)
    assert longer[:6] == sample and all(len(c.recipe.steps) == 1 for c in longer[6:])  # then the other single settings
    assert len({c.recipe.key() for c in designed_sample(space, 100)}) == len(space)
    assert designed_sample(space, 6, seed=1) != sample  # seeded: another workload, another order


def test_a_plan_splits_into_parts_that_cover_it_once():
    whole = default_plan("cuda", 8)
    parts = [default_plan("cuda", 8, part=(k, 3)) for k in (1, 2, 3)]
    assert sorted(e.label() for p in parts for e in p) == sorted(e.label() for e in whole)
    assert main(["collect", "--plan", "--plan-part", "4/3"]) == 2


@pytest.mark.slow
def test_collect_records_a_designed_sample_and_exports_the_dataset(tmp_path, capsys):
    dataset = tmp_path / "d.csv"
    code = main(["collect", "gen:mlp-w32-d1", "--batch", "2", "--device", "cpu", "--sample", "4", "--budget-per-workload", "90s", "--transforms", "precision,int8-weight-only,compile",
                 "--dataset", str(dataset), "--json"])
    assert code == 0, capsys.readouterr().err
    rows = list(csv.DictReader(dataset.open()))
    assert len(rows) >= 4 and {r["run_kind"] for r in rows} == {"collect"} and {r["family"] for r in rows} == {"gen:mlp"}
    assert all(r["batch"] == "2" and r["recipe"].startswith("[") for r in rows)
    assert any(k.startswith("sig.") for k in rows[0]) and any(k.startswith("dev.") for k in rows[0])
    measured = [r for r in rows if r["status"] == "ok"]
    assert measured and all(float(r["speedup"]) > 0 and r["passed"] in ("True", "False") for r in measured)
    assert main(["costmodel", "train", "--out", str(tmp_path / "m.json")]) == 0  # from the store the collector filled


@pytest.mark.slow
def test_optimize_with_the_model_strategy_trains_on_the_store_and_shows_its_predictions(tmp_path, monkeypatch, capsys):
    from agnitra.search.costmodel import from_store

    cheap = "precision,int8-weight-only,threads"  # nothing compiles: seconds, not minutes
    assert main(["collect", "gen:mlp-w32-d1", "gen:mlp-w64-d1", "--batch", "2", "--device", "cpu", "--transforms", cheap, "--sample", "4", "--budget-per-workload", "40s"]) == 0
    monkeypatch.setattr(from_store, "MIN_STORED", 8)  # a test's store is small
    assert main(["optimize", "gen:mlp-w48-d1", "--batch", "2", "--device", "cpu", "--strategy", "model", "--budget", "45s", "--peers", "", "--transforms", cheap,
                 "--out", str(tmp_path / "run"), "--json"]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    notes = report["search"]["notes"]
    assert any(n.startswith("model: cost model trained on") for n in notes), notes
    assert not any("measured first" in n for n in notes)  # the recommended recipes are left to the model that learned from them
    predicted = [c for c in report["candidates"] if c.get("predicted")]
    assert predicted and all(0 <= c["predicted"]["p_pass"] <= 1 and c["predicted"]["speedup"] > 0 for c in predicted)
    assert "predicted" in (tmp_path / "run" / "candidates.csv").read_text().splitlines()[0]
    assert "Cost model: predicted vs measured speedup" in (tmp_path / "run" / "report.html").read_text()


def test_collect_keeps_going_past_a_workload_that_cannot_be_built(capsys):
    from agnitra import api

    collected = api.collect([PlanEntry("gen:mlp-w32"), PlanEntry("zoo:nothing")], device="cpu", sample=1, budget_per_workload="10s")
    assert [c.report for c in collected] == [None, None]
    assert "not a generated workload name" in collected[0].error and "no zoo workload named 'nothing'" in collected[1].error


def test_collect_measures_the_named_recipes_in_their_order_on_every_workload(tmp_path, capsys, builtin_transforms_only):
    """--recipes replaces the designed sample: each named recipe, with its parameters' defaults
    filled in as the search's own candidates have them, on each workload, in the order given."""
    dataset = tmp_path / "d.csv"
    code = main(["collect", "gen:mlp-w32-d1", "gen:mlp-w48-d1", "--batch", "2", "--device", "cpu", "--budget-per-workload", "60s",
                 "--recipes", "threads(count=1) ; int8-weight-only(min_features=8)", "--dataset", str(dataset), "--json"])
    assert code == 0, capsys.readouterr().err
    rows = list(csv.DictReader(dataset.open()))
    by_workload: dict[str, list[list[dict]]] = {}
    for r in rows:
        by_workload.setdefault(r["workload"], []).append(json.loads(r["recipe"]))
    assert sorted(by_workload) == ["mlp-w32-d1", "mlp-w48-d1"]
    for recipes in by_workload.values():
        assert [[s["transform"] for s in r] for r in recipes] == [["threads"], ["int8-weight-only"]]
        assert recipes[0][0]["params"] == {"count": 1} and recipes[1][0]["params"] == {"min_features": 8, "skip": ""}  # the default filled in


@pytest.mark.parametrize("recipes, said", [
    (" ; ", "--recipes names no recipe"),
    ("compile(mode=fastest)", "compile"),
    ("no-such-transform", "no-such-transform"),
])
def test_a_bad_named_recipe_is_one_line_before_anything_is_measured(recipes, said, capsys):
    assert main(["collect", "gen:mlp-w32-d1", "--device", "cpu", "--recipes", recipes]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and "Traceback" not in err and len(err.splitlines()) == 1, err

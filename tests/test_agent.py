"""The learning agent (issue 55): the environment keeps gymnasium's contract and masks what the
space forbids, behaviour cloning imitates the best measured recipe, a few hundred PPO steps beat
a random policy on a planted cost model, `--strategy ppo` runs and explains its pick, and the CLI's
mistakes end in one line. CPU only, tiny budgets."""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("sb3_contrib")  # the `agent` extra

import agnitra  # noqa: E402
from agnitra.cli import main  # noqa: E402
from agnitra.search.agent.parts import ABSENT, Layout, Reach, candidate_of, candidate_steps  # noqa: E402
from agnitra.search.agent.reward import Scene, Weights, reward  # noqa: E402
from agnitra.search.agent.state import StateSpec  # noqa: E402
from agnitra.search.costmodel.model import Prediction  # noqa: E402
from agnitra.search.space import recipe_space  # noqa: E402
from agnitra.transforms.base import TRANSFORMS, Choice, Transform, TransformContext, register_transform  # noqa: E402
from agnitra.transforms.recipe import Recipe  # noqa: E402
from agnitra.workloads.base import TaskKind, Workload  # noqa: E402

SEARCHED = {"dynamic-int8", "int8-weight-only", "threads", "compile"}
ROW = {"device_kind": "cpu", "batch": 4, "sig.size": 0.3, "hot.time_share.matmul": 0.8, "dev.logical_cores": 2, "dev.memory_bytes": 64 * 2**30}


def _mlp() -> Workload:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    make = lambda seed: (torch.randn(4, 32, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("mlp", model, make(0), TaskKind.GENERIC, batch=4, make_inputs=make)


class Planted:
    """A planted cost model: compile and dynamic-int8 pay, threads(count=1) costs, int8 weight-only
    often fails verification."""

    EFFECT = {"compile": 0.4, "dynamic-int8": 0.25, "int8-weight-only": 0.1, "threads": -0.3}

    def predict_recipes(self, row: dict, recipes: list[list[dict]]) -> list[Prediction]:
        out = []
        for steps in recipes:
            log_speedup = sum(self.EFFECT[s["transform"]] for s in steps)
            p_pass = 0.3 if any(s["transform"] == "int8-weight-only" for s in steps) else 0.95
            out.append(Prediction(log_speedup, 0.05, p_pass, 0.8 if any("int8" in s["transform"] for s in steps) else 1.0))
        return out


@pytest.fixture(scope="module")
def space():
    candidates, _ = recipe_space(TransformContext(_mlp(), torch.device("cpu")), allowed=SEARCHED)
    return candidates


def _scene(space) -> tuple[Scene, StateSpec]:
    layout, spec = Layout.from_recipes(candidate_steps(c) for c in space), StateSpec.from_rows([ROW])
    return Scene.of(ROW, Reach.of(layout, space), spec, Weights.for_device(ROW), Planted()), spec


def test_the_environment_keeps_gymnasiums_contract(space):
    from gymnasium.utils.env_checker import check_env

    from agnitra.search.agent.env import INVALID_REWARD, RecipeEnv

    scene, spec = _scene(space)
    env = RecipeEnv([scene], spec)
    check_env(env, skip_render_check=True)
    assert [d.transform for d in scene.layout.dimensions][-1] in ("compile", "threads")  # whole-model choices last
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape and obs.dtype == np.float32
    forbidden = int(np.flatnonzero(~env.action_masks())[0]) if not env.action_masks().all() else None
    if forbidden is not None:
        assert env.step(forbidden)[1:3] == (INVALID_REWARD, True)  # plain PPO: penalised, the episode ends


def test_masking_forbids_a_pair_of_one_exclusive_group(space):
    from agnitra.search.agent.env import RecipeEnv

    scene, spec = _scene(space)
    dims = [d.transform for d in scene.layout.dimensions]
    assert dims.index("dynamic-int8") < dims.index("int8-weight-only")  # both weight formats, in their order
    env = RecipeEnv([scene], spec)
    env.reset(seed=0)
    chosen = 1  # dynamic-int8's first choice
    for i, _ in enumerate(dims[: dims.index("int8-weight-only")]):
        mask = env.action_masks()
        action = chosen if i == dims.index("dynamic-int8") else ABSENT
        assert mask[action]
        env.step(action)
    assert env.action_masks().tolist() == [True] + [False] * (scene.layout.actions - 1)  # int8 weight-only: absent only


def test_the_reward_weighs_memory_more_on_a_memory_poor_device():
    small, large = Weights.for_device({"dev.memory_bytes": 8 * 2**30}), Weights.for_device(ROW)
    assert small.beta > large.beta and Weights.for_device(ROW, alpha=0.5, beta=0.5) == Weights(0.5, 0.5)
    p = Prediction(math.log(2.0), 0.0, 0.9, 0.5)
    assert reward(p, large) == pytest.approx(0.9 * 0.5 + 0.1 * 0.5 - 1.0 * 0.1)


def _planted_rows(workloads: int = 6) -> list[dict]:
    """Every run measured four recipes; plain compile is always the best."""
    recipes = {"compile(mode=default)": 1.6, "threads(count=1)": 0.7, "dynamic-int8": 1.2, "dynamic-int8 + compile(mode=default)": 1.4}
    rows = []
    for w in range(workloads):
        for name, speedup in recipes.items():
            steps = Recipe.parse(name).to_dict()["steps"]
            rows.append({"group": f"run{w}", "run_id": w, "workload": f"w{w}", "device_kind": "cpu", "device": "AMD EPYC", "batch": 2 ** w, "sig.size": w / workloads,
                         "dev.memory_bytes": 64 * 2**30, "recipe": json.dumps(steps), "status": "ok", "speedup": speedup * (1 + 0.01 * w), "passed": True})
    return rows


def test_behaviour_cloning_makes_the_greedy_episode_pick_the_best_measured_recipe():
    from agnitra.search.agent.evaluate import evaluate
    from agnitra.search.agent.train import train_policy

    rows = _planted_rows()
    trained = train_policy(rows, steps=0)
    assert trained.imitated == 6 and trained.ppo_steps == 0
    found = evaluate(trained.policy, rows, "cpu")
    assert {w.agent for w in found.workloads} == {Recipe.parse("compile(mode=default)").name}
    assert found.beats_compile == (6, 6)


def test_a_few_hundred_ppo_steps_beat_the_random_policy_on_a_planted_cost_model(space):
    from agnitra.search.agent.train import train_on_space

    scene, spec = _scene(space)
    rng = np.random.default_rng(0)

    def random_episode() -> tuple[int, ...]:
        actions: tuple[int, ...] = ()
        for _ in scene.layout.dimensions:
            actions += (int(rng.choice(np.flatnonzero(scene.reach.mask(actions)))),)
        return actions

    random_mean = np.mean([scene.reward(random_episode()) for _ in range(200)])
    policy, ran = train_on_space(scene, spec, steps=384, seconds=30.0)
    learned_mean = np.mean([scene.reward(policy.episode(scene, greedy=False, rng=rng)) for _ in range(200)])
    assert ran >= 384 and learned_mean > random_mean + 0.05, (learned_mean, random_mean)


def test_a_saved_policy_reloads_without_a_pickle_and_plays_the_same(space, tmp_path):
    from agnitra.search.agent.policy import Policy, latest
    from agnitra.search.agent.train import train_on_space

    scene, spec = _scene(space)
    policy, _ = train_on_space(scene, spec, steps=8, seconds=10.0)
    path = policy.save(tmp_path / "agent" / "cpu", "cpu", {"training_rows": 0})
    again = latest(tmp_path, "cpu")
    assert path.name == "policy-0001.json" and again.record["device_class"] == "cpu" and again.record["agnitra"] == agnitra.__version__
    assert again.episode(scene) == policy.episode(scene)
    policy.save(tmp_path / "agent" / "cpu", "cpu", {})
    assert latest(tmp_path, "cpu").record["version"] == 2 and isinstance(Policy.load(path), Policy)
    assert Policy.uniform(scene.layout, spec, scene.weights).episode(scene) in scene.reach.candidates  # untrained: the first valid recipe


class _Slow(nn.Linear):
    """A linear layer that sleeps a little each call until `agent-fast` set `fast`."""

    fast = False

    def forward(self, x):
        time.sleep(0.0 if self.fast else 0.004)
        return super().forward(x)


@dataclass
class _Level:
    level: int = 2


class _AgentFast(Transform):
    name = "agent-fast"
    description = "test transform: level 2 makes _Slow fast, level 1 does nothing"
    Params = _Level

    def choices(self, ctx):
        return [Choice(self.name, (("level", 2),), 2.0), Choice(self.name, (("level", 1),), 1.5)]

    def apply(self, model, ctx, params):
        for m in model.modules():
            if isinstance(m, _Slow) and params.level == 2:
                m.fast = True  # the patcher's copy, never the user's
        return model


@pytest.fixture
def agent_fast():
    register_transform(_AgentFast)
    try:
        yield
    finally:
        TRANSFORMS.pop("agent-fast")  # other tests' spaces stay as they were


def test_strategy_ppo_runs_in_optimize_and_the_report_names_the_agents_choices(tmp_path, agent_fast):
    make = lambda seed: (torch.randn(4, 32, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    mlp = nn.Sequential(_Slow(32, 64), nn.ReLU(), nn.Linear(64, 8)).eval()  # a tiny MLP, slow until agent-fast
    sleepy = Workload("slow-mlp", mlp, make(0), TaskKind.GENERIC, batch=4, make_inputs=make)
    fast = agnitra.optimize(sleepy, device="cpu", strategy="ppo", transforms=["agent-fast"], budget="60s", peers=[], out=tmp_path)
    search = fast.report.search
    assert search["strategy"] == "ppo"
    assert any(n.startswith("ppo: no saved policy for cpu; a small one trained here on the transforms' priors") for n in search["notes"]), search["notes"]
    first = fast.report.candidates[0]
    assert first.predicted["agent"] == "greedy" and [c["choice"] for c in first.predicted["choices"]] == ["agent-fast(level=2)"], first.predicted
    assert any(n.startswith("ppo: the agent's greedy pick, agent-fast(level=2), part by part as predicted: agent-fast(level=2) x2.00; measured ") for n in search["notes"])
    assert fast.report.chosen and search["proposed_by"] == "agent"
    assert any(n.startswith("agent: the answer was its greedy pick; part by part as predicted: agent-fast(level=2) x2.00; measured ") for n in search["notes"]), search["notes"]
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["candidates"][0]["predicted"]["choices"] == first.predicted["choices"]


def test_each_part_of_an_agents_recipe_gets_its_predicted_effect(space):
    from agnitra.search.agent.reward import choice_effects

    scene, _ = _scene(space)
    both = next(a for a, c in scene.reach.candidates.items() if [s.transform for s in c.recipe.steps] == ["dynamic-int8", "compile"])
    effects = {e.dimension: e for e in choice_effects(scene, both)}
    assert set(effects) == {"dynamic-int8", "compile"}
    assert effects["compile"].speedup_factor == pytest.approx(math.exp(0.4)) and effects["dynamic-int8"].speedup_factor == pytest.approx(math.exp(0.25))
    assert effects["compile"].reward_gain > 0


@pytest.mark.parametrize("argv, message", [
    (["agent", "train", "--device-class", "tpu"], "unknown device class 'tpu'"),
    (["agent", "train"], "no recipe measurements on cpu in the store"),
    (["agent", "train", "--dataset", "missing.csv"], "dataset not found: missing.csv"),
    (["agent", "train", "--from-store", "--dataset", "d.csv"], "--from-store and --dataset: give one"),
    (["agent", "train", "--steps", "-1"], "--steps must be a whole number >= 0"),
    (["agent", "eval"], "no recipe measurements on cpu in the store"),
])
def test_agent_mistakes_end_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_without_the_extra_training_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sb3_contrib", None)  # an import of it fails, as where the extra is missing
    assert main(["agent", "train"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'agnitra[agent]'" in err and len(err.strip().splitlines()) == 1


def test_agent_train_then_eval_from_a_dataset(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(tmp_path / "cache"))  # its own policies: the first is version 1
    path = tmp_path / "d.csv"
    rows = _planted_rows()
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    assert main(["agent", "train", "--dataset", str(path), "--steps", "0", "--device-class", "cpu"]) == 0
    assert "policy 1 for cpu: cloned the best recipe of 6 run(s)" in capsys.readouterr().out
    assert main(["agent", "eval", "--dataset", str(path), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["policy"] == 1 and found["beats_compile"] == 6 and found["with_compile"] == 6
    assert main(["agent", "eval", "--dataset", str(path), "--workloads", "nope"]) == 2
    assert "none of nope is among the measured workloads on cpu" in capsys.readouterr().err


def _gpu_rows(workloads: int = 4) -> list[dict]:
    """Another device's runs: CUDA graphs alone win, plain compile is slower, and a state feature
    (`dev.sm_count`) the CPU rows lack."""
    recipes = {"cuda-graphs": 4.0, "compile(mode=default)": 1.1, "compile(mode=default) + cuda-graphs": 3.0}
    rows = []
    for w in range(workloads):
        for name, speedup in recipes.items():
            steps = Recipe.parse(name).to_dict()["steps"]
            rows.append({"group": f"gpu{w}", "run_id": 100 + w, "workload": f"g{w}", "device_kind": "cuda", "device": "NVIDIA H100 80GB HBM3", "batch": 2 ** w,
                         "sig.size": w / workloads, "dev.sm_count": 132, "dev.memory_bytes": 80 * 2**30, "recipe": json.dumps(steps), "status": "ok",
                         "speedup": speedup * (1 + 0.01 * w), "passed": True})
    return rows


def test_a_policy_fine_tuned_from_another_device_keeps_its_actions_and_learns_the_new_rows():
    from agnitra.search.agent.evaluate import evaluate
    from agnitra.search.agent.policy import Policy
    from agnitra.search.agent.train import train_policy

    source = train_policy(_planted_rows(), steps=0).policy
    tuned = train_policy(_gpu_rows(), steps=0, start=source)
    layout = tuned.policy.layout
    for d in source.layout.dimensions:  # the source's choices keep their places: its actions mean what they meant
        assert layout.dimensions[[n.transform for n in layout.dimensions].index(d.transform)].choices[: len(d.choices)] == d.choices
    assert "dev.sm_count" in tuned.policy.spec.columns(layout) and tuned.imitated == 4
    assert {w.agent for w in evaluate(tuned.policy, _gpu_rows(), "cuda-sm90").workloads} == {Recipe.parse("cuda-graphs").name}
    # carried over before any training: on a state of the source's rows, the same logits for the source's actions
    carried = Policy(layout, tuned.policy.spec, source.weights, source.transplant(layout, tuned.policy.spec, tuned.policy.tensors))
    row = _planted_rows()[0]
    space = [candidate_of(json.loads(r["recipe"])) for r in _planted_rows()]
    old_obs = source.spec.observe(source.spec.features(row, Reach.of(source.layout, space)), source.layout, ())
    new_obs = carried.spec.observe(carried.spec.features(row, Reach.of(layout, space)), layout, ())
    assert np.allclose(carried.logits(new_obs)[: source.layout.actions], source.logits(old_obs), atol=1e-5)


def test_plain_compile_reads_an_older_rows_missing_parameters_as_their_defaults():
    from agnitra.search.agent.evaluate import plain_compile

    assert plain_compile([{"transform": "compile", "params": {"freezing": False, "mode": "default", "pdl": True}}])  # a row of the first space version
    assert not plain_compile([{"transform": "compile", "params": {"freezing": True, "mode": "default", "pdl": True}}])
    assert not plain_compile([{"transform": "compile", "params": {"mode": "max-autotune"}}])


def test_the_state_says_which_parts_a_space_has_so_a_policy_tells_a_space_without_onnx_runtime():
    from agnitra.search.agent.evaluate import evaluate
    from agnitra.search.agent.train import train_policy

    def runs(first: int, with_ort: bool) -> list[dict]:
        recipes = {"onnxruntime": 3.0, "compile(mode=default)": 1.5, "threads(count=1)": 0.7} if with_ort else {"compile(mode=default)": 1.6, "threads(count=1)": 0.7}
        return [{"group": f"run{w}", "run_id": w, "workload": f"w{w}", "device_kind": "cpu", "device": "AMD EPYC", "batch": 1, "sig.size": 0.5,  # alike but for the space
                 "dev.memory_bytes": 64 * 2**30, "recipe": json.dumps(Recipe.parse(name).to_dict()["steps"]), "status": "ok", "speedup": s, "passed": True}
                for w in range(first, first + 4) for name, s in recipes.items()]

    rows = runs(0, True) + runs(4, False)
    policy = train_policy(rows, steps=0).policy
    picked = {w.workload: w.agent for w in evaluate(policy, rows, "cpu").workloads}
    assert {picked[f"w{w}"] for w in range(4)} == {Recipe.parse("onnxruntime").name}
    assert {picked[f"w{w}"] for w in range(4, 8)} == {Recipe.parse("compile(mode=default)").name}, picked


def test_a_policy_saved_before_the_availability_bit_still_loads_and_plays(space, tmp_path):
    from agnitra.search.agent.policy import Policy
    from agnitra.search.agent.train import train_on_space

    layout = Layout.from_recipes(candidate_steps(c) for c in space)
    old_spec = StateSpec.from_rows([ROW])
    old_spec.availability = False
    scene = Scene.of(ROW, Reach.of(layout, space), old_spec, Weights.for_device(ROW), Planted())
    policy, _ = train_on_space(scene, old_spec, steps=8, seconds=10.0)
    path = policy.save(tmp_path, "cpu", {})
    record = json.loads(path.read_text())
    del record["state"]["availability"]  # as an older release wrote it
    path.write_text(json.dumps(record))
    again = Policy.load(path)
    assert again.spec.availability is False
    assert again.episode(Scene.of(ROW, Reach.of(again.layout, space), again.spec, again.weights, Planted())) == policy.episode(scene)


@pytest.mark.parametrize("objective", ["latency", "memory"])
def test_the_runs_objective_reaches_the_agents_reward(space, objective):
    """A policy trained for speed alone plays its greedy pick first under `latency`; under `memory`
    the reward weighs memory first and ranks that pick among its samples: dynamic int8 (the planted
    model's smaller recipe) comes first, and a measured recipe's memory counts in its reward."""
    from agnitra.search.agent.policy import Policy
    from agnitra.search.strategies.model import ModelGuided
    from agnitra.search.strategies.ppo import Ppo

    scene, spec = _scene(space)
    speed_only = Policy.uniform(scene.layout, spec, Weights(1.0, 0.0))
    strategy = Ppo.playing(space, speed_only, ModelGuided(space), ROW, objective=objective)
    strategy.scene.predictor = Planted()
    first = strategy.ask()
    said = strategy.proposed[first.recipe.key()]
    if objective == "latency":
        assert strategy.scene.weights == Weights(1.0, 0.0) and not strategy.reranked
        assert said["agent"] == "greedy" and first.recipe.key() == scene.reach.candidates[speed_only.episode(scene)].recipe.key()
    else:
        assert strategy.scene.weights.beta > strategy.scene.weights.alpha and strategy.reranked
        name = first.recipe.name
        assert "dynamic-int8" in name and "int8-weight-only" not in name, name
        strategy.baseline_bytes = 1000
        result = type("Result", (), {"speedup": 1.0, "passed": True, "model_bytes": 500})()
        strategy.tell(first, result)
        actions = scene.layout.encode(first.recipe.to_dict()["steps"])
        assert strategy.scene.measured[actions] == pytest.approx(strategy.scene.weights.beta * 0.5)

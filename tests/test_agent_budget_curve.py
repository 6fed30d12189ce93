"""Issue 55's budget-curve comparison (benchmarks/budget_curve.py --strategies default,ppo): each
other strategy's answer judged against the default's within the file's noise rule, the share at
least as fast against the 80% target, the held-out workloads whose default answer was the compile
peer; the policies' training workloads deciding what is held out; each run's cache holding the
policies to play; and the ppo strategy playing a saved policy with torch alone (no stable-baselines3,
sb3-contrib or gymnasium). CPU only, pure functions but the last."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "budget_curve.py"


@pytest.fixture(scope="module")
def bc():
    spec = importlib.util.spec_from_file_location("budget_curve_agent", HERE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _row(workload, strategy, answer, kind, speedup, interval=None, held_out=None, budget_s=120.0, status="ok"):
    row = {"workload": workload, "budget": "2m", "budget_s": budget_s, "strategy_asked": strategy, "status": status,
           "answer": answer, "answer_kind": kind, "speedup": speedup, "speedup_interval": interval}
    if held_out is not None:
        row["held_out"] = held_out
    return row


def test_judge_keeps_the_files_noise_rule(bc):
    default = _row("w", "default", "compile", "peer", 2.0)
    assert bc.judge(_row("w", "ppo", "compile", "peer", 1.5), default)["verdict"] == "same answer"  # one answer: a tie, whatever the two runs timed
    assert bc.judge(_row("w", "ppo", "a + b", "own", 2.2), default)["verdict"] == "faster"
    assert bc.judge(_row("w", "ppo", "a + b", "own", 2.2, [1.9, 2.5]), default)["verdict"] == "at least as fast"  # its interval reaches below the default's
    assert bc.judge(_row("w", "ppo", "a + b", "own", 2.0 * 0.98), default)["verdict"] == "at least as fast"  # within WITHIN_NOISE
    assert bc.judge(_row("w", "ppo", "a + b", "own", 1.8, [1.6, 2.05]), default)["verdict"] == "at least as fast"
    slower = bc.judge(_row("w", "ppo", "a + b", "own", 1.8, [1.6, 1.9]), default)
    assert slower["verdict"] == "slower" and slower["at_least"] is False and slower["ratio"] == pytest.approx(0.9)
    assert bc.judge(_row("w", "ppo", "original", "original", None), default)["verdict"] == "not compared"


def test_compare_strategies_counts_against_the_target_and_the_held_out_compile_peers(bc):
    rows = [
        _row("zoo:bert-base@b1", "default", "fuse-projections + cuda-graphs", "own", 7.5, held_out=False),
        _row("zoo:bert-base@b1", "ppo", "fuse-projections + cuda-graphs", "own", 7.4, held_out=False),
        _row("hf:vit", "default", "compile", "peer", 1.15, held_out=True),
        _row("hf:vit", "ppo", "fuse-projections + compile + cuda-graphs", "own", 1.5, [1.45, 1.55], held_out=True),
        _row("hf:gpt2", "default", "compile", "peer", 1.5, held_out=True),
        _row("hf:gpt2", "ppo", "compile", "peer", 1.49, held_out=True),
        _row("hf:opt", "default", "onnxruntime", "peer", 1.4, held_out=True),  # an ONNX Runtime peer is not the compile peer
        _row("hf:opt", "ppo", "int8-weight-only", "own", 1.0, held_out=True),
        _row("hf:t5", "default", "compile", "peer", 1.3, held_out=True),
        {"workload": "hf:t5", "budget": "2m", "budget_s": 120.0, "strategy_asked": "ppo", "status": "skipped", "reason": "would not end before the deadline"},
    ]
    c = bc.compare_strategies(rows)["120s"]["ppo"]
    assert c["against"] == "default"
    assert {w: x["verdict"] for w, x in c["workloads"].items()} == {"zoo:bert-base@b1": "same answer", "hf:vit": "faster", "hf:gpt2": "same answer", "hf:opt": "slower"}
    assert c["at_least_as_fast"] == {"count": 3, "of": 4, "share": 0.75, "target": 0.8, "met": False, "workloads": ["zoo:bert-base@b1", "hf:vit", "hf:gpt2"]}
    assert c["held_out_default_compile_peer"] == {"workloads": ["hf:vit", "hf:gpt2"], "faster": ["hf:vit"], "met": False}
    assert c["faster"] == ["hf:vit"] and c["slower"] == ["hf:opt"] and c["held_out"] == ["hf:vit", "hf:gpt2", "hf:opt"]
    assert c["not_compared"] == {"hf:t5": "would not end before the deadline"}
    lines = bc.comparison_lines(bc.compare_strategies(rows))
    assert lines[0].startswith("budget 120s: ppo vs default: at least as fast on 3/4 (75%; target 80%: not met); faster 1, slower 1;")
    assert any("hf:vit (held out): faster" in line and "the compile peer" in line for line in lines)
    # one strategy alone: nothing compared, and the summary keeps its keys as before the option
    alone = [r for r in rows if r["strategy_asked"] == "default"]
    assert bc.compare_strategies(alone) == {} and list(bc.summarize(alone)) == ["120s"]
    assert list(bc.summarize(rows)) == ["120s default", "120s ppo"] and bc.summarize(rows)["120s ppo"]["strategy"] == "ppo"


def test_every_workload_at_least_as_fast_meets_the_target(bc):
    rows = [_row(f"w{i}", s, "compile", "peer", 1.2 + i, held_out=i % 2 == 0) for i in range(5) for s in ("default", "ppo")]
    rows[-1] = _row("w4", "ppo", "x + compile", "own", 5.2 * 1.1, held_out=True)
    c = bc.compare_strategies(rows)["120s"]["ppo"]
    assert c["at_least_as_fast"]["met"] is True and c["at_least_as_fast"]["share"] == 1.0
    assert c["held_out_default_compile_peer"] == {"workloads": ["w0", "w2", "w4"], "faster": ["w4"], "met": False}


def test_strategies_and_held_out_from_the_policies_training_workloads(bc, tmp_path):
    assert bc.parse_strategies("ppo, default,ppo") == ["default", "ppo"]
    with pytest.raises(SystemExit):
        bc.parse_strategies("default,PPO!")
    records = {"cuda-sm90": {"training_workloads": {"bert-base": [8], "resnet50": [32], "mlp-w512-d2": [1, 32]}},
               "cpu": {"training_workloads": {"minilm": [8], "roberta-small-b8": [8]}}}
    works = ["zoo:bert-base@b1", "zoo:resnet50@b64", "hf:vit", "hf:roberta", "zoo:llama-1b"]
    held, how = bc.held_out_map(works, None, records, "cuda")
    assert held == {"zoo:bert-base@b1": False, "zoo:resnet50@b64": False, "hf:vit": True, "hf:roberta": True, "zoo:llama-1b": True} and "training_workloads" in how
    assert bc.held_out_map(works, None, records, "cpu")[0]["hf:roberta"] is False  # the CPU policy saw hf_families' roberta
    assert bc.held_out_map(works, "hf:vit", records, "cuda")[0] == {w: w == "hf:vit" for w in works}
    assert bc.held_out_map(works, None, {"cuda-sm90": {}}, "cuda") == ({}, "")  # a record without the names: nothing claimed
    with pytest.raises(SystemExit):
        bc.held_out_map(works, "hf:gpt2", records, "cuda")


def test_each_run_gets_a_cache_with_the_policies_and_the_rest_linked(bc, tmp_path):
    agent = tmp_path / "dev" / "agent" / "cuda-sm90"
    agent.mkdir(parents=True)
    (agent / "policy-0001.json").write_text(json.dumps({"version": 1, "device_class": "cuda-sm90", "training_workloads": {"bert-base": [8]}}))
    (agent / "policy-0001.pt").write_bytes(b"tensors")
    (agent / "policy-0002.json").write_text(json.dumps({"version": 2, "device_class": "cuda-sm90"}))
    folder = bc.agent_folder(tmp_path / "dev")  # the cache folder given: its agent/ taken
    assert folder == tmp_path / "dev" / "agent" and bc.agent_records(folder)["cuda-sm90"]["version"] == 2  # the newest, as a run plays it
    with pytest.raises(SystemExit):
        bc.agent_folder(tmp_path / "nothing")
    base = tmp_path / "cache"
    (base / "tuning").mkdir(parents=True)
    (base / "agent" / "cuda-sm90").mkdir(parents=True)  # the user's own policies: not what the run plays
    cache = bc.run_cache(tmp_path / "scratch", base, folder)
    assert (cache / "tuning").is_symlink() and (cache / "tuning").resolve() == (base / "tuning").resolve()
    assert not (cache / "agent").is_symlink() and (cache / "agent" / "cuda-sm90" / "policy-0001.pt").read_bytes() == b"tensors"
    plan = bc.Plan(bc.parse_workload("hf:vit", "cuda", "base"), "2m", 120.0, "ppo", folder)
    command = bc.command_of(plan, "cuda", tmp_path / bc.run_name(plan))
    assert command[command.index("--strategy") + 1] == "ppo" and command[-2].endswith("hf-vit-120s-ppo")
    default = bc.Plan(plan.work, "2m", 120.0)
    assert "--strategy" not in bc.command_of(default, "cuda", tmp_path / "x") and bc.run_name(default) == "hf-vit-120s"


def test_a_saved_policy_plays_without_the_agent_extra(monkeypatch, tmp_path):
    """The ppo strategy's path from a saved policy to its proposals imports no stable-baselines3,
    sb3-contrib or gymnasium (the GPU machine has none); where the policy reaches nothing and a
    policy would be trained on the spot, a one-line UserError names the extra (attach turns it into
    a note and the search goes on)."""
    from agnitra.errors import UserError
    from agnitra.search.agent.parts import Layout, candidate_steps
    from agnitra.search.agent.policy import Policy
    from agnitra.search.agent.reward import Weights
    from agnitra.search.agent.state import StateSpec
    from agnitra.search.space import recipe_space
    from agnitra.search.strategies.ppo import Ppo
    from agnitra.transforms.base import TransformContext
    from agnitra.workloads.base import TaskKind, Workload

    for name in ("stable_baselines3", "sb3_contrib", "gymnasium", "agnitra.search.agent.env"):
        monkeypatch.setitem(sys.modules, name, None)  # any import of them fails
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    workload = Workload("mlp", model, (torch.randn(4, 32),), TaskKind.GENERIC, batch=4)
    space, _ = recipe_space(TransformContext(workload, torch.device("cpu")), allowed={"dynamic-int8", "compile"})
    row = {"device_kind": "cpu", "batch": 4, "sig.size": 0.3, "dev.memory_bytes": 64 * 2**30}
    spec = StateSpec.from_rows([row])
    cache = tmp_path / "cache"
    Policy.uniform(Layout.from_recipes(candidate_steps(c) for c in space), spec, Weights.for_device(row)).save(cache / "agent" / "cpu", "cpu", {"training_rows": 3})
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(cache))
    strategy = Ppo(space)
    notes = strategy._start(row)
    assert notes[0].startswith("ppo: policy 1 for cpu (3 training rows"), notes
    first = strategy.ask()
    assert first is not None and strategy.proposed[first.recipe.key()]["agent"] == "greedy"
    elsewhere = tmp_path / "elsewhere"  # a policy whose choices the space lacks: the strategy would train one here
    Policy.uniform(Layout.from_recipes([[{"transform": "fuse-projections", "params": {}}]]), spec, Weights.for_device(row)).save(elsewhere / "agent" / "cpu", "cpu", {})
    monkeypatch.setenv("AGNITRA_CACHE_DIR", str(elsewhere))
    with pytest.raises(UserError, match="stable-baselines3, sb3-contrib and gymnasium"):
        Ppo(space)._start(row)

"""Training the agent: first behaviour cloning of the best measured recipe of each workload (the
store's rows or a dataset CSV: the recipe that passed with the highest measured reward, the
compile-only recipe where it was best), then PPO on `RecipeEnv` (sb3-contrib's MaskablePPO over
stable-baselines3). The environment's space for each workload is the catalogue of every recipe the
rows hold; a recipe measured on that workload is scored by its measurement, the others by the cost
model trained on the same rows. `train_on_space`: a small policy for one search, from the cost
model alone, within a few seconds. stable-baselines3, sb3-contrib and gymnasium are the `agent`
extra, imported here only when training."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from agnitra.errors import UserError
from agnitra.search.agent.parts import Layout, Reach, candidate_of
from agnitra.search.agent.policy import Policy
from agnitra.search.agent.reward import PriorPredictor, Scene, Weights, measured_reward
from agnitra.search.agent.state import StateSpec
from agnitra.search.costmodel.features import steps_of

EXTRA = "pip install 'agnitra[agent]'"
NET = [64, 64]  # sb3's MlpPolicy default, pinned: `Policy.logits` evaluates exactly this network
BC_EPOCHS = 300  # full-batch passes over the imitated steps
LEARNING_RATE = 3e-3  # PPO from scratch (on the spot) and behaviour cloning
REFINE_LEARNING_RATE = 3e-4  # PPO after cloning: a smaller step keeps what was cloned
N_STEPS = 128  # PPO's rollout between updates: episodes are a dozen steps


def sb3():
    """MaskablePPO, or a one-line error naming the extra."""
    try:
        import gymnasium  # noqa: F401
        import stable_baselines3  # noqa: F401
        from sb3_contrib import MaskablePPO
    except ImportError as exc:
        raise UserError(f"the agent needs stable-baselines3, sb3-contrib and gymnasium ({exc.name or 'one'} is not installed): {EXTRA}") from None
    return MaskablePPO


def make_model(env, seed: int = 0, n_steps: int = N_STEPS, learning_rate: float = LEARNING_RATE):
    MaskablePPO = sb3()
    kwargs = {"net_arch": {"pi": NET, "vf": NET}, "activation_fn": torch.nn.Tanh}
    return MaskablePPO("MlpPolicy", env, n_steps=n_steps, batch_size=min(64, n_steps), n_epochs=4, learning_rate=learning_rate, gamma=1.0,
                       ent_coef=0.01, seed=seed, device="cpu", verbose=0, policy_kwargs=kwargs)


def learn(model, steps: int, seconds: float | None = None) -> int:
    """PPO for `steps` environment steps, or until `seconds` have passed; the steps it ran."""
    from stable_baselines3.common.callbacks import BaseCallback

    deadline = None if seconds is None else time.monotonic() + seconds

    class Clock(BaseCallback):
        def _on_step(self) -> bool:
            return deadline is None or time.monotonic() < deadline

    if steps > 0:
        model.learn(total_timesteps=steps, callback=Clock())
    return int(model.num_timesteps)


def policy_of(model, layout: Layout, spec: StateSpec, weights: Weights) -> Policy:
    return Policy(layout, spec, weights, {k: v.detach().cpu().clone() for k, v in model.policy.state_dict().items()})


@dataclass
class Example:
    obs: np.ndarray
    mask: list[bool]
    action: int


def trajectory(scene: Scene, spec: StateSpec, actions: tuple[int, ...]) -> list[Example]:
    """The states and masks along a recipe's episode, with the action taken at each."""
    return [Example(spec.observe(scene.features, scene.layout, actions[:i]), scene.reach.mask(actions[:i]), a) for i, a in enumerate(actions)]


def behaviour_clone(model, examples: list[Example], epochs: int = BC_EPOCHS) -> float:
    """The policy's log-likelihood of the imitated actions raised, full batch; the last loss."""
    policy = model.policy
    obs = torch.as_tensor(np.stack([e.obs for e in examples]))
    actions = torch.as_tensor([e.action for e in examples])
    masks = np.stack([e.mask for e in examples])
    loss = torch.tensor(0.0)
    for group in policy.optimizer.param_groups:  # PPO's `learn` sets its own rate again
        group["lr"] = LEARNING_RATE
    policy.set_training_mode(True)
    for _ in range(epochs):
        _, log_prob, _ = policy.evaluate_actions(obs, actions, action_masks=masks)
        loss = -log_prob.mean()
        policy.optimizer.zero_grad()
        loss.backward()
        policy.optimizer.step()
    policy.set_training_mode(False)
    return float(loss.detach())


def mean_reward(policy: Policy, scenes: list[Scene]) -> float:
    """The mean reward of the greedy episode over the scenes."""
    rewards = [s.reward(a) for s in scenes if (a := policy.episode(s)) is not None]
    return float(np.mean(rewards)) if rewards else 0.0


@dataclass
class Best:
    group: str
    row: dict
    steps: list[dict]
    reward: float


def memory_ratio(row: dict) -> float | None:
    return row["model_bytes"] / row["baseline_model_bytes"] if row.get("model_bytes") and row.get("baseline_model_bytes") else None


def row_reward(row: dict, weights: Weights) -> float | None:
    """A row's measured reward; a recipe that failed or timed out scores as failing verification."""
    if row.get("status") != "ok" or not row.get("speedup"):
        return -weights.penalty if row.get("status") in ("failed", "timeout") else None
    return measured_reward(row["speedup"], bool(row.get("passed")), memory_ratio(row), weights)


def best_measured(rows: list[dict], weights: dict[str, Weights]) -> tuple[list[Best], int]:
    """Each run's recipe with the highest measured reward among those that passed; and how many
    runs had none that passed and beat the original (nothing to imitate there)."""
    by_group: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_group[r.get("group") or ""].append(r)
    bests, none = [], 0
    for group, members in by_group.items():
        scored = [(row_reward(r, weights[group]), r) for r in members if r.get("passed") and steps_of(r)]
        scored = [(s, r) for s, r in scored if s is not None and s > 0]
        if not scored:
            none += 1
            continue
        score, row = max(scored, key=lambda sr: sr[0])
        bests.append(Best(group, row, steps_of(row), score))
    return bests, none


@dataclass
class Trained:
    policy: Policy
    rows: int
    workloads: int
    imitated: int  # runs whose best recipe was cloned
    nothing_to_imitate: int
    bc_loss: float
    ppo_steps: int
    reward_after_bc: float
    reward_after_ppo: float
    notes: list[str] = field(default_factory=list)
    batches: dict[str, list[int]] = field(default_factory=dict)  # each training workload's batch sizes: what a held-out claim is checked against

    def record(self) -> dict:
        return {"training_rows": self.rows, "workloads": self.workloads, "imitated": self.imitated, "nothing_to_imitate": self.nothing_to_imitate,
                "bc_loss": round(self.bc_loss, 4), "ppo_steps": self.ppo_steps, "mean_reward_after_bc": round(self.reward_after_bc, 4),
                "mean_reward_after_ppo": round(self.reward_after_ppo, 4), "notes": self.notes, "training_workloads": self.batches}


def scenes_of(rows: list[dict], layout: Layout, spec: StateSpec, weights: dict[str, Weights], predictor) -> dict[str, Scene]:
    """One scene per run: the catalogue of the rows' recipes made of the transforms the run
    measured (what applies to its workload, as far as the rows say: a decoder's run without ONNX
    Runtime is played without it), its own measurements as rewards."""
    catalogue = list({json_key(steps_of(r)): candidate_of(steps_of(r)) for r in rows if steps_of(r)}.values())
    applied: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        applied[r.get("group") or ""].update(s["transform"] for s in steps_of(r) or [])
    reaches: dict[frozenset[str], Reach] = {}
    scenes: dict[str, Scene] = {}
    for r in rows:
        group = r.get("group") or ""
        if group not in scenes:
            key = frozenset(applied[group])
            reach = reaches.get(key) or reaches.setdefault(key, Reach.of(layout, [c for c in catalogue if {s.transform for s in c.recipe.steps} <= key]))
            scenes[group] = Scene.of(r, reach, spec, weights[group], predictor)
        scene = scenes[group]
        actions, score = layout.encode(steps_of(r)), row_reward(r, weights[group])
        if actions is not None and any(actions) and score is not None:
            scene.measured[actions] = max(score, scene.measured.get(actions, -math.inf))
    return scenes


def json_key(steps: list[dict]) -> str:
    from agnitra.search.agent.parts import step_key

    return "|".join(step_key(s) for s in steps)


def train_policy(rows: list[dict], steps: int, seed: int = 0, alpha: float | None = None, beta: float | None = None, seconds: float | None = None,
                 start: Policy | None = None, cost_model=None) -> Trained:
    """Behaviour cloning on the best measured recipes, then `steps` of PPO on the cost model
    (`cost_model`, else one fitted on the rows). With `start` (a saved policy, e.g. another device
    class's) that policy is fine-tuned: its layout and state names grow by what the rows hold and
    its weights are carried over (`Policy.transplant`) before the cloning."""
    from agnitra.search.agent.env import RecipeEnv

    sb3()
    rows = [r for r in rows if _readable(r)]
    weights = {r.get("group") or "": Weights.for_device(r, alpha, beta) for r in rows}
    bests, none = best_measured(rows, weights)
    if not bests:
        raise UserError(f"no run in the {len(rows)} row(s) has a recipe that passed and beat its original: nothing to imitate; collect more (`agnitra collect`)")
    layout = Layout.from_recipes((steps_of(r) for r in rows), start=start.layout if start else None)
    spec = StateSpec.from_rows(rows) if start is None else start.spec.union(StateSpec.from_rows(rows))
    with one_thread():
        scenes = scenes_of(rows, layout, spec, weights, cost_model if cost_model is not None else _predictor(rows, steps))
        env = RecipeEnv(list(scenes.values()), spec)
        model = make_model(env, seed, learning_rate=REFINE_LEARNING_RATE)
        if start is not None:
            model.policy.load_state_dict(start.transplant(layout, spec, model.policy.state_dict()))
        examples = [e for b in bests if (a := layout.encode(b.steps)) is not None for e in trajectory(scenes[b.group], spec, a)]
        loss = behaviour_clone(model, examples)
        weight = next(iter(weights.values()))
        after_bc = mean_reward(policy_of(model, layout, spec, weight), env.scenes)
        ran = learn(model, steps, seconds)
        policy = policy_of(model, layout, spec, weight)
        workloads = len({r.get("workload") for r in rows})
        notes = [f"fine-tuned from policy {start.record.get('version')} of {start.record.get('device_class')}"] if start is not None and start.record else []
        return Trained(policy, len(rows), workloads, len(bests), none, loss, ran, after_bc, mean_reward(policy, env.scenes), notes, workload_batches(rows))


def workload_batches(rows: list[dict]) -> dict[str, list[int]]:
    """The rows' workloads by name, each with the batch sizes it was measured at (none where the rows do not say)."""
    out: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        name = r.get("workload")
        if not name:
            continue
        batches = out[str(name)]
        try:
            batches.add(int(float(r.get("batch"))))
        except (TypeError, ValueError):
            pass
    return {name: sorted(batches) for name, batches in sorted(out.items())}


@contextmanager
def one_thread():
    """torch on one thread while training: the network is 64 wide and a batch a few hundred rows;
    on the 2 shared cores of the VM two threads waited on each other (cloning on the CPU
    datasets: 95 s on two threads, 8 s on one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _readable(row: dict) -> bool:
    try:
        return isinstance(steps_of(row), list)
    except ValueError:
        return False


def _predictor(rows: list[dict], steps: int):
    """The cost model on the rows where PPO will ask it (steps > 0), else the priors (unused)."""
    if steps <= 0:
        return PriorPredictor([])
    from agnitra.search.costmodel import CostModel

    return CostModel.fit(rows)


def train_on_space(scene: Scene, spec: StateSpec, steps: int, seconds: float, seed: int = 0) -> tuple[Policy, int]:
    """A small policy for one workload's space from the scene's predictions: PPO alone, at most
    `steps` steps or `seconds`."""
    from agnitra.search.agent.env import RecipeEnv

    with one_thread():
        env = RecipeEnv([scene], spec)
        model = make_model(env, seed, n_steps=min(N_STEPS, max(steps, 2)))
        ran = learn(model, steps, seconds)
        return policy_of(model, scene.layout, spec, scene.weights), ran

"""`ppo`: the learning agent's recipes first (`search.agent`), then the cost model's order (`model`).

The agent is the newest policy saved for this device class (`agnitra agent train`), or, where
none is saved or it reaches no recipe of this space, a small one trained here on the spot by PPO
on this workload's space, scored by the cost model (the store's, the seed's, or the transforms'
priors where none trains), within ON_THE_SPOT_S seconds; the notes say which. Its greedy episode
is asked first, then sampled episodes, each batch ranked by the predicted reward, skipping
duplicates, recipes outside the space and steps that failed alone; once a batch brings nothing new,
the `model` strategy's order goes on. Every result is told to that `model` strategy (its rows and
retraining), and a measured recipe's reward replaces its prediction in the agent's scene.
`predicted()` carries, for the agent's recipes, each part's choice and its predicted effect.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from agnitra.errors import UserError
from agnitra.search.space import Candidate
from agnitra.search.strategies.base import SearchContext, Strategy, register_strategy
from agnitra.search.strategies.model import ModelGuided

ON_THE_SPOT_STEPS = 1024
STEPS_PER_CANDIDATE = 64  # a small space needs fewer
ON_THE_SPOT_S = 4.0  # a cap on the search's time: the agent's first recipes come from a few seconds of PPO
SAMPLES = 32  # sampled episodes a batch
PRECOMPUTE_LIMIT = 50_000  # spaces up to this size are predicted in one call before training


@register_strategy
class Ppo(Strategy):
    name = "ppo"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__(space)
        self.inner = ModelGuided(space, stop_gain=0.0)  # the order after the agent's recipes, and the run's rows
        self.policy = None
        self.scene = None
        self.queue: list[tuple[tuple[int, ...], str]] = []  # (actions, how it was proposed)
        self.proposed: dict[str, dict] = {}  # recipe key -> what the agent said of it
        self.seen: set[tuple[int, ...]] = set()
        self.rng = np.random.default_rng(0)
        self.exhausted = False
        self.greedy_told = ""
        self.objective = "latency"
        self.baseline_bytes: int | None = None
        self.reranked = False  # the run's objective weighs other than the policy's training: its greedy pick is ranked among samples

    @classmethod
    def playing(cls, space: list[Candidate], policy, inner: ModelGuided, row: dict, objective: str = "latency") -> "Ppo":
        """The strategy with a given policy and a given `model` strategy after it (no store, no
        saved policy read): a replay's, whose cost model trained on the rows it chose. Where the
        policy reaches no recipe of the space, `inner`'s order alone."""
        from agnitra.search.agent.reward import PriorPredictor

        strategy = cls(space)
        strategy.inner, strategy.objective = inner, objective
        strategy._use(policy, row, inner.model if inner.model is not None and inner.model.speed else PriorPredictor(space))
        return strategy

    def attach(self, context: SearchContext) -> list[str]:
        notes = self.inner.attach(context)
        self.objective, self.baseline_bytes = context.objective, context.baseline_model_bytes
        try:
            notes += self._start(context.workload_row)
        except UserError as exc:
            notes.append(f"ppo: no agent ({exc}); the cost model's order")
        return notes

    def _start(self, row: dict) -> list[str]:
        from agnitra.config import load_settings
        from agnitra.search.agent.policy import class_here, latest
        from agnitra.search.agent.reward import PriorPredictor

        predictor = self.inner.model if self.inner.model is not None and self.inner.model.speed else PriorPredictor(self.space)
        scored = "the cost model" if predictor is self.inner.model else "the transforms' priors (no cost model)"
        name = class_here(row.get("device_kind"))
        saved = latest(load_settings().cache_path, name)
        if saved is not None:
            note = self._use(saved, row, predictor)
            if note:
                return [note]
        return [self._on_the_spot(row, predictor, scored, name)]

    def _use(self, policy, row: dict, predictor) -> str:
        """A saved policy, where it reaches a recipe of this space ('' where it does not)."""
        from agnitra.search.agent.parts import Reach
        from agnitra.search.agent.reward import Scene, Weights

        reach = Reach.of(policy.layout, self.space)
        if not reach.candidates:
            return ""
        weights = Weights.for_objective(row, self.objective, default=policy.weights)
        self.reranked = (weights.alpha, weights.beta) != (policy.weights.alpha, policy.weights.beta)
        self.policy, self.scene = policy, Scene.of(row, reach, policy.spec, weights, predictor)
        r = policy.record
        note = (f"ppo: policy {r.get('version')} for {r.get('device_class')} ({r.get('training_rows')} training rows, {r.get('date')}); "
                f"it reaches {len(reach.candidates)} of the {len(self.space)} candidates")
        if self.reranked:
            note += (f"; the objective '{self.objective}' weighs speed {weights.alpha:g} and memory {weights.beta:g} (the policy was trained with "
                     f"{policy.weights.alpha:g} and {policy.weights.beta:g}): its greedy pick and its samples are ranked together by that reward")
        return note

    def _on_the_spot(self, row: dict, predictor, scored: str, name: str) -> str:
        from agnitra.search.agent.parts import Layout, Reach, candidate_steps
        from agnitra.search.agent.policy import Policy
        from agnitra.search.agent.reward import Scene, Weights
        from agnitra.search.agent.state import StateSpec

        layout, spec = Layout.from_recipes(candidate_steps(c) for c in self.space), StateSpec.from_rows([row])
        reach = Reach.of(layout, self.space)
        if not reach.candidates:
            raise UserError("the space is empty")
        self.scene = Scene.of(row, reach, spec, Weights.for_objective(row, self.objective), predictor)
        if len(reach.candidates) == 1:
            self.policy = Policy.uniform(layout, spec, self.scene.weights)
            return f"ppo: no saved policy for {name}; one recipe in the space, nothing to learn"
        started = time.monotonic()
        ran = self._train(spec, min(ON_THE_SPOT_STEPS, STEPS_PER_CANDIDATE * len(reach.candidates)))
        return (f"ppo: no saved policy for {name}; a small one trained here on {scored}: {ran} PPO steps in {time.monotonic() - started:.1f} s "
                f"(at most {ON_THE_SPOT_STEPS} steps or {ON_THE_SPOT_S:.0f} s; `agnitra agent train` trains a lasting one)")

    def _train(self, spec, steps: int) -> int:
        from agnitra.search.agent.train import sb3, train_on_space

        sb3()
        if len(self.scene.reach.candidates) <= PRECOMPUTE_LIMIT:
            self.scene.precompute()
        self.policy, ran = train_on_space(self.scene, spec, steps, ON_THE_SPOT_S)
        return ran

    def ask(self) -> Candidate | None:
        while (found := self._next_proposal()) is not None:
            actions, how = found
            candidate = self.scene.reach.candidates[actions]
            key = candidate.recipe.key()
            if key in self.inner.asked or not self.inner.failed.allows(candidate):
                continue
            self.inner.asked.add(key)
            self.proposed[key] = self._explain(actions, how)
            return candidate
        return self.inner.ask()

    def _next_proposal(self) -> tuple[tuple[int, ...], str] | None:
        if self.policy is None or self.exhausted:
            return None
        if not self.queue:
            self._refill()
        return self.queue.pop(0) if self.queue else None

    def _refill(self) -> None:
        """The greedy episode first; then a batch of sampled ones, new and in the space, best
        predicted reward first; a batch with nothing new ends the agent's turn."""
        greedy = not self.seen
        episodes = [self.policy.episode(self.scene, greedy=True)] if greedy else []
        if not greedy or self.reranked:
            episodes += [self.policy.episode(self.scene, False, self.rng) for _ in range(SAMPLES)]
        fresh = list(dict.fromkeys(a for a in episodes if a is not None and a not in self.seen and a in self.scene.reach.candidates))
        self.seen.update(fresh)
        if not fresh:
            self.exhausted = not greedy or self.exhausted
            if greedy:
                self.seen.add(())  # the greedy episode led nowhere: sample next time
            return
        picked = episodes[0] if greedy else None
        self.queue = [(a, "greedy" if a == picked else "sampled") for a in sorted(fresh, key=self._reward, reverse=True)]

    def _reward(self, actions: tuple[int, ...]) -> float:
        """The scene's reward, from the `model` strategy's newest prediction where it has one."""
        from agnitra.search.agent.reward import reward

        p = self.inner.predictions.get(self.scene.reach.candidates[actions].recipe.key())
        return reward(p, self.scene.weights) if p is not None and actions not in self.scene.measured else self.scene.reward(actions)

    def _explain(self, actions: tuple[int, ...], how: str) -> dict:
        from agnitra.search.agent.reward import choice_effects

        return {"agent": how, "reward": round(self._reward(actions), 4), "choices": [e.to_dict() for e in choice_effects(self.scene, actions)]}

    def tell(self, candidate: Candidate, result: Any) -> None:
        self.inner.tell(candidate, result)
        if self.scene is None:
            return
        from agnitra.search.agent.reward import measured_reward

        actions = self.scene.layout.encode(candidate.recipe.to_dict()["steps"])
        model_bytes = getattr(result, "model_bytes", None)
        memory = model_bytes / self.baseline_bytes if model_bytes and self.baseline_bytes else None
        real = measured_reward(getattr(result, "speedup", None), bool(getattr(result, "passed", False)), memory, self.scene.weights)
        if actions is not None and real is not None:
            self.scene.measured[actions] = real
        said = self.proposed.get(candidate.recipe.key())
        if said and said["agent"] == "greedy":
            self.greedy_told = _greedy_note(candidate, said, result)

    def measured(self, candidate: Candidate, predicted: float) -> float | None:
        """`RecipeEnv`'s hook: the reward measured for a recipe in this run, where it was."""
        actions = self.scene.layout.encode(candidate.recipe.to_dict()["steps"]) if self.scene else None
        return self.scene.measured.get(actions) if actions is not None else None

    def predicted(self, candidate: Candidate) -> dict | None:
        said = self.inner.predicted(candidate)
        agent = self.proposed.get(candidate.recipe.key())
        if agent is None:
            return said
        if said is None and self.scene is not None:  # no cost model: the scene's own prediction (the priors)
            actions = self.scene.layout.encode(candidate.recipe.to_dict()["steps"])
            said = self.scene.predict([actions])[0].to_dict() if actions is not None else {}
        return {**(said or {}), **agent}

    def time_left(self, seconds: float | None) -> None:
        super().time_left(seconds)
        self.inner.time_left(seconds)

    def learned_notes(self) -> list[str]:
        said = [f"ppo: the agent proposed {len(self.proposed)} of the recipes asked for; the others came in the `model` strategy's order"] if self.policy is not None else []
        return ([self.greedy_told] if self.greedy_told else []) + said + self.inner.learned_notes()

    def learned_from_store(self) -> bool:
        return self.inner.learned_from_store() or (self.policy is not None and bool(self.policy.record))


def _greedy_note(candidate: Candidate, said: dict, result: Any) -> str:
    parts = ", ".join(f"{c['choice']} x{c['speedup_factor']:.2f}" for c in said["choices"])
    speedup = getattr(result, "speedup", None)
    measured = f"measured {speedup:.2f}x, {'passed' if getattr(result, 'passed', False) else 'did not pass'}" if speedup else f"not timed ({getattr(result, 'status', '?')})"
    return f"ppo: the agent's greedy pick, {candidate.recipe.name}, part by part as predicted: {parts}; {measured}"

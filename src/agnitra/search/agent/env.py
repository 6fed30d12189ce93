"""The agent's environment, a plain `gymnasium.Env`: an episode builds one recipe for one workload,
a dimension (`parts.Dimension`) a step, module transforms first and the whole-model choices
(compile, CUDA graphs, threads, a runtime) last. Each step picks one choice or absent (action 0);
`action_masks()` gives the actions that still lead to a recipe of the workload's space (exclusive
groups, conflicts), for sb3-contrib's MaskablePPO. An action outside the mask ends the episode
with INVALID_REWARD (plain PPO learns to avoid them). The reward comes at the end only
(`reward.reward`, from the cost model's prediction); the `measured` hook gets each finished
recipe with its predicted reward and may return its measured reward instead (the `ppo` strategy
hands the best-rated recipes to the search loop, which measures them). gymnasium is imported
here only: the module is loaded lazily."""

from __future__ import annotations

from typing import Callable

import gymnasium as gym
import numpy as np

from agnitra.search.agent.reward import Scene
from agnitra.search.agent.state import BOUND, StateSpec
from agnitra.search.space import Candidate

INVALID_REWARD = -1.0


class RecipeEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, scenes: list[Scene], spec: StateSpec, measured: Callable[[Candidate, float], float | None] | None = None) -> None:
        self.scenes = [s for s in scenes if s.reach.candidates]  # a workload the layout reaches nothing of has no episode
        if not self.scenes:
            raise ValueError("no scene with a recipe the layout can build")
        self.layout = self.scenes[0].layout
        if not self.layout.dimensions:
            raise ValueError("a layout without dimensions")
        self.state, self.measured = spec, measured
        self.observation_space = gym.spaces.Box(-BOUND, BOUND, (spec.size(self.layout),), np.float32)
        self.action_space = gym.spaces.Discrete(self.layout.actions)
        self.scene, self.actions = self.scenes[0], ()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        index = (options or {}).get("scene")
        self.scene = self.scenes[int(self.np_random.integers(len(self.scenes))) if index is None else index]
        self.actions = ()
        return self._observe(), {}

    def step(self, action):
        action = int(action)
        if not self.scene.reach.mask(self.actions)[action]:
            return self._observe(), INVALID_REWARD, True, False, {"invalid": True}
        self.actions += (action,)
        if len(self.actions) < len(self.layout.dimensions):
            return self._observe(), 0.0, False, False, {}
        return self._observe(), self._final_reward(), True, False, {"recipe": self.layout.decode(self.actions)}

    def action_masks(self) -> np.ndarray:
        return np.asarray(self.scene.reach.mask(self.actions), dtype=bool)

    def _observe(self) -> np.ndarray:
        return self.state.observe(self.scene.features, self.layout, self.actions)

    def _final_reward(self) -> float:
        predicted = self.scene.reward(self.actions)
        if self.measured is None:
            return float(predicted)
        real = self.measured(self.scene.reach.candidates[self.actions], predicted)
        return float(predicted if real is None else real)

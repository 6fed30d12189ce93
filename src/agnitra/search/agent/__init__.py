"""The learning agent (issue 55): an episode builds a recipe part by part (`parts`: a dimension of
the recipe space a step), scored at the end by the cost model (`reward`); the state is the
workload's signature, its hotspot features, the device and the choices so far (`state`). The
environment (`env`, gymnasium) and the training (`train`: behaviour cloning of the best measured
recipes, then PPO through stable-baselines3 / sb3-contrib) need the `agent` extra and are imported
only where used; a saved policy (`policy`) plays with torch alone. The `ppo` strategy
(`search.strategies.ppo`) asks its recipes first."""

from agnitra.search.agent.parts import Dimension, Layout, Reach
from agnitra.search.agent.policy import Policy, device_class
from agnitra.search.agent.reward import ChoiceEffect, Scene, Weights, reward
from agnitra.search.agent.state import StateSpec

__all__ = ["ChoiceEffect", "Dimension", "Layout", "Policy", "Reach", "Scene", "StateSpec", "Weights", "device_class", "reward"]

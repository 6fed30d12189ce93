"""A trained policy: its layout (the choices it may pick), its state names, its reward weights and
the policy network's weights, and what it plays (`episode`: the greedy recipe, or one sampled).

Saved per device class (`cpu`, `cuda-sm90`, ..., `cuda` where the GPU's generation is not known)
under `<cache>/agent/<class>/` as `policy-NNNN.pt` (the network's tensors, `torch.save` of a
state dict, read back with `weights_only=True`: no pickle runs) beside `policy-NNNN.json` (schema,
device class, training rows and workloads, date, Agnitra's version, layout, state names, weights);
the highest NNNN is the one used. Playing a policy needs torch only: the network (sb3's MlpPolicy
actor, tanh layers then the action logits) is evaluated from its tensors here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from agnitra.errors import UserError
from agnitra.search.agent.parts import Layout
from agnitra.search.agent.reward import Scene, Weights
from agnitra.search.agent.state import StateSpec

SCHEMA = "agnitra.agent/1"
CLASS_PATTERN = re.compile(r"^(cpu|cuda|cuda-sm\d{2,3})$")
# the GPUs of the datasets, by the name in their rows (the store keeps the name, not the generation)
SM_BY_NAME = (("H100", "90"), ("H200", "90"), ("GH200", "90"), ("A100", "80"), ("A30", "80"), ("A10", "86"), ("L40", "89"), ("L4", "89"), ("RTX 40", "89"),
              ("RTX 30", "86"), ("V100", "70"), ("T4", "75"), ("B200", "100"), ("B100", "100"))
_LAYER = re.compile(r"^mlp_extractor\.policy_net\.(\d+)\.weight$")


def device_class(kind: str | None, name: str | None = None, capability: tuple[int, int] | None = None) -> str:
    """`cpu`, `cuda-smNN` (from the capability, else the GPU's name), or `cuda` where neither says."""
    if kind != "cuda":
        return "cpu"
    if capability is not None:
        return f"cuda-sm{capability[0]}{capability[1]}"
    for part, sm in SM_BY_NAME:
        if name and part in name:
            return f"cuda-sm{sm}"
    return "cuda"


def class_here(kind: str | None) -> str:
    """This machine's device class for a device kind."""
    if kind == "cuda" and torch.cuda.is_available():
        return device_class("cuda", torch.cuda.get_device_name(), torch.cuda.get_device_capability())
    return device_class(kind)


def check_class(name: str) -> None:
    if not CLASS_PATTERN.match(name or ""):
        raise UserError(f"unknown device class '{name}': use cpu, cuda (any GPU) or cuda-smNN (e.g. cuda-sm90 for H100/H200)")


def rows_of_class(rows: list[dict], name: str) -> list[dict]:
    """The rows measured on a device class (`cuda`: every GPU)."""
    if name == "cuda":
        return [r for r in rows if r.get("device_kind") == "cuda"]
    return [r for r in rows if device_class(r.get("device_kind"), r.get("device")) == name]


@dataclass
class Policy:
    layout: Layout
    spec: StateSpec
    weights: Weights
    tensors: dict[str, torch.Tensor]  # the sb3 policy's state dict (actor and critic)
    record: dict = field(default_factory=dict)

    @classmethod
    def uniform(cls, layout: Layout, spec: StateSpec, weights: Weights) -> "Policy":
        """An untrained policy: every valid action alike (greedy: the first valid one)."""
        tensors = {"action_net.weight": torch.zeros(layout.actions, spec.size(layout)), "action_net.bias": torch.zeros(layout.actions)}
        return cls(layout, spec, weights, tensors)

    def logits(self, obs: np.ndarray) -> np.ndarray:
        h = torch.as_tensor(obs, dtype=torch.float32)
        layers = sorted((int(m.group(1)), k) for k in self.tensors if (m := _LAYER.match(k)))
        with torch.no_grad():
            for _, key in layers:
                h = torch.tanh(h @ self.tensors[key].T + self.tensors[key.replace("weight", "bias")])
            return (h @ self.tensors["action_net.weight"].T + self.tensors["action_net.bias"]).numpy()

    def choose(self, obs: np.ndarray, mask: list[bool], greedy: bool, rng: np.random.Generator) -> int:
        logits = np.where(mask, self.logits(obs), -np.inf)
        if greedy:
            return int(np.argmax(logits))
        p = np.exp(logits - logits.max())
        return int(rng.choice(len(p), p=p / p.sum()))

    def episode(self, scene: Scene, greedy: bool = True, rng: np.random.Generator | None = None) -> tuple[int, ...] | None:
        """The recipe the policy builds on a scene (None where the scene gives no valid action)."""
        rng = rng or np.random.default_rng(0)
        actions: tuple[int, ...] = ()
        for _ in self.layout.dimensions:
            mask = scene.reach.mask(actions)
            if not any(mask):
                return None
            actions += (self.choose(self.spec.observe(scene.features, self.layout, actions), mask, greedy, rng),)
        return actions

    def transplant(self, layout: Layout, spec: StateSpec, fresh: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`fresh` (a new network's tensors for `layout` and `spec`) with this policy's weights carried
        over: the input layers' by state column name (a column this policy never had starts at 0, so
        a new feature does not move what it learned), the hidden layers whole, each action's output
        row where this policy had the action (`Layout.from_recipes(start=)` keeps choices in place)."""
        before = {name: i for i, name in enumerate(self.spec.columns(self.layout))}
        after = spec.columns(layout)
        out = {k: v.detach().clone() for k, v in fresh.items()}
        for key, tensor in self.tensors.items():
            target = out.get(key)
            if target is None:
                continue
            if key.startswith("mlp_extractor.") and key.endswith(".0.weight"):  # [hidden, state]
                target.zero_()
                for j, name in enumerate(after):
                    if name in before:
                        target[:, j] = tensor[:, before[name]]
            elif key.startswith("action_net."):  # [actions, hidden], [actions]
                n = min(target.shape[0], tensor.shape[0])
                target[:n] = tensor[:n]
            elif target.shape == tensor.shape:
                target.copy_(tensor)
        return out

    def save(self, folder: Path, device_class_name: str, training: dict) -> Path:
        """`policy-NNNN.pt` and its `.json` record, NNNN one past the highest in the folder."""
        from agnitra._version import __version__

        folder.mkdir(parents=True, exist_ok=True)
        number = 1 + max((int(m.group(1)) for p in folder.glob("policy-*.json") if (m := re.match(r"policy-(\d+)\.json$", p.name))), default=0)
        stem = folder / f"policy-{number:04d}"
        torch.save({k: v.detach().cpu().contiguous() for k, v in self.tensors.items()}, stem.with_suffix(".pt"))
        self.record = {"schema": SCHEMA, "version": number, "device_class": device_class_name, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "agnitra": __version__, **training, "layout": self.layout.to_dict(), "state": self.spec.to_dict(), "weights": self.weights.to_dict()}
        stem.with_suffix(".json").write_text(json.dumps(self.record, indent=1))
        return stem.with_suffix(".json")

    @classmethod
    def load(cls, record_path: Path) -> "Policy":
        """A saved policy: its record, then its tensors, read without running any pickle."""
        try:
            record = json.loads(record_path.read_text())
            if record.get("schema") != SCHEMA:
                raise UserError(f"{record_path} is not an {SCHEMA} policy; train one with `agnitra agent train`")
            tensors = torch.load(record_path.with_suffix(".pt"), weights_only=True, map_location="cpu")
            return cls(Layout.from_dict(record["layout"]), StateSpec.from_dict(record["state"]), Weights(**record["weights"]), tensors, record)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, json.JSONDecodeError) as exc:
            raise UserError(f"{record_path} is not a readable policy ({type(exc).__name__}); train it again with `agnitra agent train`") from None


def policy_folder(cache: Path, device_class_name: str) -> Path:
    return cache / "agent" / device_class_name


def latest(cache: Path, device_class_name: str) -> Policy | None:
    """The newest saved policy of a device class, or None."""
    records = sorted(policy_folder(cache, device_class_name).glob("policy-*.json"))
    return Policy.load(records[-1]) if records else None

"""`agnitra agent eval`: a policy's greedy recipe on each stored run's workload, among the recipes
measured in that run (so its answer has a measurement), against plain `torch.compile` (compile
with its default parameters) and the best recipe measured there. Nothing is measured anew: a
run whose measured recipes the policy cannot build is counted apart."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

from agnitra.search.agent.parts import Reach, candidate_of
from agnitra.search.agent.policy import Policy
from agnitra.search.agent.reward import PriorPredictor, Scene
from agnitra.search.costmodel.features import steps_of


@dataclass
class WorkloadEval:
    workload: str
    run: str
    agent: str  # the recipe the policy built
    agent_speedup: float | None
    agent_passed: bool
    compile_speedup: float | None  # plain torch.compile, where the run measured it
    best: str
    best_speedup: float | None


@dataclass
class AgentEval:
    device_class: str
    policy: int | None  # the saved policy's number
    workloads: list[WorkloadEval] = field(default_factory=list)
    unreachable: int = 0  # runs none of whose measured recipes the policy can build

    @property
    def beats_compile(self) -> tuple[int, int]:
        """(runs where the agent's pick passed at least as fast as plain compile, runs with a compile)."""
        compared = [w for w in self.workloads if w.compile_speedup]
        return sum(1 for w in compared if w.agent_passed and (w.agent_speedup or 0) >= w.compile_speedup), len(compared)

    def to_dict(self) -> dict:
        wins, compared = self.beats_compile
        return {"device_class": self.device_class, "policy": self.policy, "unreachable": self.unreachable, "beats_compile": wins, "with_compile": compared,
                "workloads": [asdict(w) for w in self.workloads]}


def plain_compile(steps: list[dict]) -> bool:
    from agnitra.transforms.base import get_transform

    if len(steps) != 1 or steps[0].get("transform") != "compile":
        return False
    default = asdict(get_transform("compile").default_params())
    return {**default, **(steps[0].get("params") or {})} == default  # rows of an older space lack the newer parameters: their defaults


def evaluate(policy: Policy, rows: list[dict], device_class_name: str, workloads: list[str] | None = None) -> AgentEval:
    by_group: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if workloads is None or r.get("workload") in workloads:
            by_group[r.get("group") or ""].append(r)
    result = AgentEval(device_class_name, policy.record.get("version"))
    for group, members in by_group.items():
        found = _one(policy, group, members)
        if found is None:
            result.unreachable += 1
        else:
            result.workloads.append(found)
    return result


def _one(policy: Policy, group: str, members: list[dict]) -> WorkloadEval | None:
    row_of = {c.recipe.key(): r for r in members if steps_of(r) for c in [candidate_of(steps_of(r))]}
    space = [candidate_of(steps_of(r)) for r in row_of.values()]
    scene = Scene.of(members[0], Reach.of(policy.layout, space), policy.spec, policy.weights, PriorPredictor(space))
    actions = policy.episode(scene) if scene.reach.candidates else None
    if actions is None:
        return None
    chosen = scene.reach.candidates[actions]
    row = row_of[chosen.recipe.key()]
    best = max((r for r in row_of.values() if r.get("passed") and r.get("speedup")), key=lambda r: r["speedup"], default=None)
    compile_row = next((r for r in row_of.values() if plain_compile(steps_of(r)) and r.get("passed")), None)
    return WorkloadEval(members[0].get("workload") or "?", group, chosen.recipe.name, row.get("speedup"), bool(row.get("passed")),
                        compile_row.get("speedup") if compile_row else None, _name(best), best.get("speedup") if best else None)


def _name(row: dict | None) -> str:
    return candidate_of(steps_of(row)).recipe.name if row else "—"

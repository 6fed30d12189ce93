"""How far the workload being searched sits from the store's workloads, learned from its own
measurements and shared with the kinds of recipe not yet measured.

The cost model, retrained on each of this workload's measurements, moves its trees in the leaves
of the recipes measured: their transforms and parameters. What a measurement says of the workload
itself does not reach the others: a workload whose eager baseline is far slower against a graph
replay than any stored workload's is so for every recipe that replays a graph, not only for the
one measured (the case that showed it: docs/search.md).

So each recipe belongs to a group (`group_of`): its kind of execution (`kind_of`: a CUDA-graph
replay, or launched from Python, whose speedup moves with the host as the baseline's does) and its
set of transforms. The first measurement of a group here is a fair test of the model on a group it
has not learned here: its miss (measured minus the retrained model's prediction, before it was
learned) says how far the model is off for groups of that kind on this workload. A group not yet
measured is predicted with the mean of its kind's misses, shrunk towards zero by KIND_PRIOR
measurements' worth of "no offset" (one miss moves the kind halfway); a measured group is left to
the retrained trees, which learned it.

What was measured, and the variants tried and not kept: docs/search.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agnitra.search.reference import replays_a_graph

KIND_PRIOR = 1.0  # the measurements' worth of "no offset" each kind starts from

Group = tuple[str, frozenset[str]]


def kind_of(steps: list[dict]) -> str:
    """'graph' for a recipe run as a CUDA-graph replay, else 'launched' (from Python)."""
    return "graph" if replays_a_graph(steps) else "launched"


def group_of(steps: list[dict]) -> Group:
    """A recipe's kind of execution and its set of transforms."""
    return kind_of(steps), frozenset(step.get("transform", "") for step in steps)


@dataclass
class WorkloadOffsets:
    """The misses of each group's first measurement on this workload, by kind."""

    misses: dict[str, list[float]] = field(default_factory=dict)
    measured: set[Group] = field(default_factory=set)

    def learn(self, group: Group, miss: float) -> None:
        """A timed recipe of `group` and its miss (a recipe that failed teaches the trees no speed)."""
        if group not in self.measured:
            self.misses.setdefault(group[0], []).append(float(miss))
        self.measured.add(group)

    def offset(self, group: Group) -> float:
        """The log-speedup offset of a recipe of `group`: 0 once its group is measured here."""
        if group in self.measured:
            return 0.0
        misses = self.misses.get(group[0], [])
        return sum(misses) / (len(misses) + KIND_PRIOR)

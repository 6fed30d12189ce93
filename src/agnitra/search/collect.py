"""The collector: a designed sample of recipes measured over many workloads, for the cost model.

For each workload of a plan, the space is built as `optimize` builds it, and a designed sample of
it is measured the way the search measures candidates (each in its own short interleaved run
against the baseline, in a worker process): one recipe of every set of transforms first (each
policy once, in a seeded order), then the other single-step settings, then multi-step recipes
drawn at random (seeded), until the sample size or the workload's share of the time is reached.
Named recipes (`--recipes`) replace the sample: each is measured on every workload, in the order
given, so a combination the sample seldom draws (a compile mode with CUDA graphs around it) is
seen everywhere it is wanted.
Nothing is skipped because something else failed: failures are data too (the cost model learns
which recipes fail verification). There is
no final run and no answer; each workload's measurements become one run of kind `collect` in
the store, and the dataset is the store exported with its features (`store.io.export_dataset`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from agnitra.bench.isolated import InProcess, Worker, WorkloadSource
from agnitra.results import DeviceReport, OptimizeReport
from agnitra.search.budget import Budget
from agnitra.search.optimize import baseline_median, graph_facts, measure_baseline, with_hotspots
from agnitra.search.reference import ReferenceBaseline
from agnitra.search.space import Candidate, recipe_space
from agnitra.search.strategies.base import Strategy
from agnitra.search.tuner import SearchConfig, pareto_front, screening_tolerances, search
from agnitra.transforms.base import TransformContext
from agnitra.transforms.recipe import Recipe
from agnitra.verify import Tolerances
from agnitra.workloads.base import Workload

MODE = "collect"
FINISH_S = 1.0  # kept at the end of a workload's share: writing its record


@dataclass(frozen=True)
class PlanEntry:
    """One workload of a plan: a model spec and the sizes it is built at."""

    spec: str
    batch: int | None = None
    seq_len: int | None = None
    tokens: int | None = None  # decoders: new tokens per generation

    def options(self) -> dict:
        """The build options it names (those left out: the workload's defaults)."""
        return {k: v for k, v in (("batch", self.batch), ("seq_len", self.seq_len), ("tokens", self.tokens)) if v is not None}

    def label(self) -> str:
        return self.spec + "".join(f" {k}={v}" for k, v in self.options().items())


@dataclass
class CollectedWorkload:
    entry: PlanEntry
    report: OptimizeReport | None = None
    error: str = ""  # why the workload could not be collected
    notes: list[str] = field(default_factory=list)


def designed_sample(space: list[Candidate], size: int, seed: int = 0) -> list[Candidate]:
    """`size` recipes: first one recipe of every set of transforms (each policy, a transform alone
    or a combination, seen once before any of its parameter variants), in a seeded order; then
    the other single-step settings, so each transform's every setting is seen alone; then
    multi-step recipes at random. A workload whose share of time ends early has still seen
    policies, not ten settings of one transform."""
    rng = random.Random(seed)
    by_policy: dict[frozenset[str], list[Candidate]] = {}
    for candidate in space:
        by_policy.setdefault(frozenset(s.transform for s in candidate.recipe.steps), []).append(candidate)
    policies = [rng.choice(members) for members in by_policy.values()]
    rng.shuffle(policies)
    chosen = {c.recipe.key() for c in policies}
    singles = [c for c in space if len(c.recipe.steps) == 1 and c.recipe.key() not in chosen]
    rest = [c for c in space if len(c.recipe.steps) > 1 and c.recipe.key() not in chosen]
    rng.shuffle(singles)
    rng.shuffle(rest)
    return (policies + singles + rest)[:size]


class InOrder(Strategy):
    """The sample in its given order; every candidate is measured, whatever failed before."""

    name = "designed-sample"

    def __init__(self, space: list[Candidate]) -> None:
        super().__init__(space)
        self._left = list(space)

    def ask(self) -> Candidate | None:
        return self._left.pop(0) if self._left else None


def collect_workload(
    workload: Workload, device: torch.device, device_report: DeviceReport, *, sample: int, budget: Budget, seed: int,
    source: WorkloadSource | None, tolerances: Tolerances, candidate_timeout_s: float, transforms: list[str] | None = None,
    recipes: list[Recipe] | None = None, progress=None,
) -> OptimizeReport:
    """One workload's designed sample (or the named `recipes`, in their order), measured; the
    report records it as a collect run."""
    notes: list[str] = []
    op_kinds, signature = graph_facts(workload, notes)
    space, skipped = recipe_space(TransformContext(workload, device, op_kinds=op_kinds), allowed=set(transforms) if transforms else None)
    chosen = [Candidate(r, 1.0) for r in recipes] if recipes else designed_sample(space, sample, seed)
    config = SearchConfig(candidate_timeout_s=candidate_timeout_s, tolerances=screening_tolerances(tolerances), lossy_part_first=False)  # every recipe timed: the speed model's data
    runner = Worker(source, progress) if source is not None else InProcess(workload, device, progress)
    with runner:
        probe, _ = measure_baseline(runner, device_report, config, budget)
        reference = ReferenceBaseline.for_device(device)
        if reference is not None:
            reference.add(baseline_median(probe.variants))
        outcome = search(InOrder(chosen), runner, device_report, config, budget, lambda results: FINISH_S, progress=progress, reference=reference)
    if signature is not None:  # the screening run skips it; the store names the workload by it
        probe.workload["signature"] = signature
        with_hotspots(probe, signature)
    info = {
        "mode": MODE, "strategy": InOrder.name, "seed": seed, "budget_s": budget.total_s, "space_size": len(space), "sample": len(chosen),
        "evaluated": len(outcome.results), "unmeasured": outcome.unmeasured, "candidate_timeout_s": candidate_timeout_s,
        "not_applicable": [{"transform": s.transform, "reason": s.reason} for s in skipped], "notes": notes + outcome.notes,
        "isolation": "worker process" if source is not None else "in-process",
    }
    passed = sum(r.passed for r in outcome.results)
    verdict = f"collected {len(outcome.results)} of {len(chosen)} {'named' if recipes else 'sampled'} recipes ({passed} passed verification) from a space of {len(space)}"
    return OptimizeReport(probe, "latency", None, Recipe().to_dict(), 1.0, outcome.results, pareto_front(outcome.results), info, verdict)


# ---- plans ----------------------------------------------------------------------------------------

ZOO_PLAN = {  # zoo workloads worth collecting on each device kind, with the sizes they are built at
    "cpu": [PlanEntry("zoo:tinylm-py"), PlanEntry("zoo:minilm", batch=8)],
    "cuda": [PlanEntry("zoo:tinylm-py"), PlanEntry("zoo:minilm", batch=32), PlanEntry("zoo:bert-base", batch=8), PlanEntry("zoo:resnet50", batch=32)],
}
BATCHES = {"cpu": (1, 16), "cuda": (1, 32)}
FAMILIES = ("mlp", "conv", "tfm")  # the generated families a plan draws from unless told
DECODER_BATCHES = (1, 8)  # decode steps: one sequence and a small batch
DECODER_TOKENS = 32  # new tokens per timed generation: a decode step's latency, measured quickly


def default_plan(device_kind: str, generated: int = 12, seed: int = 0, part: tuple[int, int] = (1, 1),
                 families: tuple[str, ...] = FAMILIES, zoo: bool = True) -> list[PlanEntry]:
    """The zoo workloads of this device kind (unless `zoo` is off), then `generated` names of the
    generated `families` (`workloads.generated.designed_sample`), each at a small and a large
    batch (decoders, `gen:lm`: a decode step at batch 1 or 8); `part` (k, n): only every n-th
    entry from the k-th, so a plan can be collected in n separate sessions."""
    from agnitra.workloads.generated import designed_sample as generated_names

    small, large = BATCHES.get(device_kind, BATCHES["cpu"])
    entries = list(ZOO_PLAN.get(device_kind, ZOO_PLAN["cpu"])) if zoo else []
    for i, name in enumerate(generated_names(generated, seed, tuple(families))):
        if name.startswith("gen:lm-"):
            entries.append(PlanEntry(name, batch=DECODER_BATCHES[i % 2], tokens=DECODER_TOKENS))
        else:
            entries.append(PlanEntry(name, batch=small if i % 2 == 0 else large))
    k, n = part
    return entries[k - 1::n]

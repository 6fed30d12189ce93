"""The baseline a search's speedups are taken against, on a GPU: one reference for every run.

Each candidate is screened in a short interleaved run beside the baseline, and its speedup is
that run's baseline median over its own. On the CPU the pairing is what makes the ratio fair:
shared load slows both alike. On a GPU it is not: the eager baseline of a small model is bound by
the host (Python, the allocator, Inductor's compile workers) and its median moves from one run to
the next while a CUDA-graph replay's holds, so ratios from different runs are on different scales
and can rank two replays in the wrong order (measured: docs/search.md).

So on a GPU, the speedup of a candidate that replays a CUDA graph (a `cuda-graphs` step, or
`compile` in a mode that captures one) is its median against the median of all the baseline
medians measured so far in that search (the probe, the peers' runs, each candidate's run): a
steadier estimate of the same baseline, the same for every such candidate. A candidate launched
from Python keeps its own run's ratio: its time moves with the host as the baseline's does, and
the pairing cancels that (rescaling those too made the cost model worse: docs/search.md).
The run's own baseline median stays on the result (`baseline_ms`), and the report says which
reference was used.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from agnitra.results import CandidateResult


@dataclass
class ReferenceBaseline:
    """The baseline medians of a search's runs, and the speedups taken against their median."""

    medians: list[float] = field(default_factory=list)

    @classmethod
    def for_device(cls, device: torch.device) -> "ReferenceBaseline | None":
        """A reference on a GPU; None on the CPU, where each run's own baseline is the fair one."""
        return cls() if device.type == "cuda" else None

    def add(self, baseline_ms: float | None) -> None:
        if baseline_ms and baseline_ms > 0:
            self.medians.append(float(baseline_ms))

    @property
    def reference_ms(self) -> float | None:
        return statistics.median(self.medians) if self.medians else None

    def rescale(self, result: CandidateResult) -> CandidateResult:
        """A graph-replaying result's speedup against the reference (its run's own baseline kept in
        `baseline_ms`); any other result as it is."""
        reference = self.reference_ms
        if (reference and result.speedup and result.latency_ms is not None and result.latency_ms.median > 0
                and replays_a_graph(result.recipe.get("steps", []) if isinstance(result.recipe, dict) else [])):
            result.speedup = reference / result.latency_ms.median
        return result

    def note(self) -> str:
        """What the report says of it."""
        if not self.medians:
            return ""
        return (f"screened speedups of recipes that replay a CUDA graph are against the median of {len(self.medians)} baseline run(s), {self.reference_ms:.3f} ms "
                f"(they ranged {min(self.medians):.3f}-{max(self.medians):.3f} ms), not each run's own: on a GPU the eager baseline's "
                "time moves from run to run while a graph replay's does not")


GRAPH_MODES = ("reduce-overhead", "max-autotune")  # compile modes that capture CUDA graphs themselves


def replays_a_graph(steps: list[dict]) -> bool:
    """Whether a recipe's steps ({"transform", "params"}) run the model as a CUDA-graph replay."""
    return any(s.get("transform") == "cuda-graphs" or (s.get("transform") == "compile" and (s.get("params") or {}).get("mode") in GRAPH_MODES) for s in steps)

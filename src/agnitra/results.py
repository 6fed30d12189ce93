"""Result dataclasses every stage returns (bench, profile, inspect, optimize, candidates); JSON via `to_dict`.

`SCHEMA` versions the JSON: keys are only ever added within a major version.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "agnitra.bench/1"
PROFILE_SCHEMA = "agnitra.profile/1"
INSPECT_SCHEMA = "agnitra.inspect/1"
OPTIMIZE_SCHEMA = "agnitra.optimize/1"


@dataclass
class Latency:
    median: float  # milliseconds
    p95: float
    min: float
    mean: float
    samples: int


@dataclass
class Throughput:
    value: float
    unit: str  # items/s, sequences/s, images/s, tokens/s


@dataclass
class Correctness:
    metric: str  # rel_error | top1 | cosine | logits | reference
    value: float | None
    passed: bool
    threshold: float | None = None
    details: dict[str, Any] = field(default_factory=dict)  # on a failure, "error": why, naming the output's leaf
    # compared | not compared (the output has no tensors or numbers: never passed) | reference
    status: str = "compared"


@dataclass
class DecodeStats:
    """Decoder runs: per-token latency of decode steps, prefill apart."""

    tokens_per_s: float
    per_token_ms: Latency
    prefill_ms: float  # median time to the first token (prompt prefill)
    new_tokens: int
    prompt_len: int
    batch: int


@dataclass
class OpRow:
    """One operator (and input-shape group) of a profiled region."""

    op: str
    calls: int
    self_time_us: float  # device self time on GPU, CPU self time on CPU, summed over calls
    share: float  # fraction of the region's total self time
    input_shapes: str
    flops: float  # per call set: summed over calls (2 per multiply-add)
    bytes: float  # read + written, summed over calls
    intensity: float | None  # flops / byte
    achieved: str = ""  # e.g. "1.2 TFLOP/s" or "850 GB/s" where meaningful


@dataclass
class VariantResult:
    name: str
    status: str  # ok | skipped | failed
    reason: str = ""
    latency_ms: Latency | None = None
    throughput: Throughput | None = None
    peak_memory_bytes: int | None = None
    model_bytes: int | None = None  # the variant's own weights and buffers on the device, storages counted once
    energy_j_per_item: float | None = None
    roofline_fraction: float | None = None
    correctness: Correctness | None = None
    setup_s: float | None = None  # build/compile/export time before the first timed run
    build_s: float | None = None  # of setup_s, building the variant (a lazy compile runs later, at the warm-up)
    decode: DecodeStats | None = None
    power_w: float | None = None  # mean board power during the energy pass (NVML)
    utilization: float | None = None  # mean GPU utilisation in percent (0-100) during the energy pass
    round_ms: list[list[float]] = field(default_factory=list)  # the timed samples of each interleaved round
    # against the reference (the first variant), from the paired rounds (agnitra.bench.noise):
    # [low, high] of the speedup's confidence interval, and whether it is faster beyond the noise
    speedup_interval: list[float] | None = None
    faster_beyond_noise: bool | None = None


@dataclass
class DeviceReport:
    name: str
    kind: str  # cpu | cuda
    signature: dict[str, Any]
    ceilings: dict[str, Any]


@dataclass
class Roofline:
    flops: float  # per timed unit (one call, or one decode step)
    bytes: float  # compulsory bytes per unit: weights read once, inputs, outputs, KV cache
    floor_ms: float
    bound: str  # compute | memory
    dtype: str
    notes: str = ""


@dataclass
class BenchReport:
    workload: dict[str, Any]
    device: DeviceReport
    conditions: dict[str, Any]
    variants: list[VariantResult]
    roofline: Roofline | None = None
    op_breakdown: list[OpRow] = field(default_factory=list)  # decoders: one decode step
    created_at: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    schema: str = SCHEMA

    def variant(self, name: str) -> VariantResult:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass
class ProfileReport:
    workload: dict[str, Any]
    device: DeviceReport
    conditions: dict[str, Any]
    latency_ms: Latency
    ops: list[OpRow]
    total_flops: float
    total_bytes: float
    peak_memory_bytes: int | None
    nvml: dict[str, Any] | None  # utilisation, power, energy; None where there is no NVML
    nvml_reason: str = ""
    created_at: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    schema: str = PROFILE_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass
class InspectReport:
    """`agnitra inspect`: the captured IR with costs and measured time, hotspots, signature."""

    workload: dict[str, Any]
    device: DeviceReport
    ir: Any  # agnitra.ir.graph.GraphIR (serialised with its own schema, agnitra.ir/1)
    hotspots: list[Any]  # agnitra.ir.hotspots.Hotspot, sorted by time
    signature: dict[str, Any]  # version, names, values
    timing: dict[str, Any] = field(default_factory=dict)  # measured total, attributed share
    created_at: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    schema: str = INSPECT_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        doc = to_dict({k: v for k, v in self.__dict__.items() if k != "ir"})
        doc["ir"] = self.ir.to_dict()
        return doc


def own_memory_bytes(result: "VariantResult | CandidateResult") -> int:
    """What a model itself holds on the device: its weights and buffers where measured, else the
    run's peak (which also holds the other variants' tensors: a model sharing all of the baseline's
    would look smallest by it)."""
    return result.model_bytes if result.model_bytes is not None else result.peak_memory_bytes or 0


WORST_ERROR = 1.0


def quality_error(metric: str | None, value: float | None) -> float:
    """A check's value as an error to minimise, about 0 (exact) to 1 (useless): 1 - cosine or
    top-1 agreement, SQNR's noise share of the signal power, the relative error or perplexity rise."""
    if value is None:
        return 0.0
    if metric in ("cosine", "top1", "retrieval", "accuracy"):
        return max(0.0, 1.0 - value)
    if metric == "logits":  # SQNR in dB
        return min(WORST_ERROR, 10 ** (-value / 10))
    return min(WORST_ERROR, max(0.0, value))


@dataclass
class CandidateResult:
    """One recipe measured against the baseline in its own short interleaved run."""

    name: str
    recipe: dict[str, Any]  # recipe.json content
    key: str  # stable identity, for --resume
    prior: float  # the speedup the rules expected
    status: str  # ok | failed | skipped | timeout
    reason: str = ""
    latency_ms: Latency | None = None
    baseline_ms: float | None = None  # baseline median in the same run
    speedup: float | None = None  # baseline / candidate median latency
    peak_memory_bytes: int | None = None  # the run's peak: the baseline's tensors resident too
    model_bytes: int | None = None  # the candidate model's own weights and buffers on the device
    correctness: Correctness | None = None
    setup_s: float | None = None
    build_s: float | None = None  # of setup_s, building the recipe: what building the answer takes again
    eval_s: float | None = None
    speedup_interval: list[float] | None = None  # [low, high] of the speedup in its own run
    faster_beyond_noise: bool | None = None  # the interval's low end above 1: a real win
    predicted: dict[str, Any] | None = None  # what the strategy's cost model expected before measuring it
    peer: str | None = None  # the peer this run measured (`compile`, `onnxruntime`, ...); None: a recipe of the search
    measured_on: dict[str, Any] | None = None  # the Ray evaluation slot that measured it (slot, node, host, pid, gpus); None: this machine's worker

    @property
    def passed(self) -> bool:
        return self.status == "ok" and self.correctness is not None and self.correctness.passed

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "CandidateResult":
        values = dict(doc)
        if values.get("latency_ms"):
            values["latency_ms"] = Latency(**values["latency_ms"])
        if values.get("correctness"):
            values["correctness"] = Correctness(**values["correctness"])
        return cls(**{k: v for k, v in values.items() if k in {f.name for f in dataclasses.fields(cls)}})


@dataclass
class OptimizeReport:
    """`agnitra optimize`: the bench report of the final run plus the search that led to it."""

    bench: BenchReport  # final interleaved run: baseline, peers, chosen recipe
    objective: str
    chosen: str | None  # variant name of the chosen recipe; None = the original model is returned
    recipe: dict[str, Any]  # the chosen recipe.json ({"steps": []} when the original is returned)
    speedup: float | None  # baseline / chosen median latency in the final run
    candidates: list[CandidateResult]
    pareto: list[str]  # names of candidates on the latency / memory / error front
    search: dict[str, Any]  # strategy, budget, elapsed, evaluated, skipped transforms and why
    verdict: str  # one line: what was chosen and why, or why nothing was
    schema: str = OPTIMIZE_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        doc = to_dict({k: v for k, v in self.__dict__.items() if k != "bench"})
        doc["bench"] = self.bench.to_dict()
        return doc

    def summary(self) -> str:
        return self.verdict


def to_dict(obj: Any) -> Any:
    """Dataclasses to plain JSON-able values (floats that are NaN/inf become None)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    return obj

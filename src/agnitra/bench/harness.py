"""The benchmark harness: several variants of one workload, measured in one interleaved run.

Order of work: probe the other processes' load and size torch's threads to the free cores
(bench.machine), choose the inputs (bench.heldout: rotation sets, held-out sets, another batch
size), prepare and warm up every variant on the example inputs (compile/export time reported as
setup), time them in interleaved rounds that rotate through the variants so drift hits all alike
(each variant's per-round samples kept, its speedup over the first variant judged against the
noise: bench.noise), then measure peak memory, energy (NVML), correctness against the first
variant that ran on the held-out inputs and the other batch size, leaf by leaf (verify), and the
roofline. Forward workloads time whole calls over rotated input sets; decoders time every decode
step of complete generations (per-token latency, tokens/s) with the prefill reported apart.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from agnitra.bench.checked_call import CheckedCall, checked_call, input_changes_problem
from agnitra.bench.heldout import InputPlan, ShapeCheck, plan_inputs
from agnitra.bench.machine import MachineWatch
from agnitra.bench.noise import MIN_PAIRED_ROUNDS, faster_beyond_noise, round_cv
from agnitra.bench.variants import Prepared, Variant, get_variant
from agnitra.errors import NotApplicable, first_line
from agnitra.models.generate import Generator, random_prompt
from agnitra.results import BenchReport, Correctness, DecodeStats, DeviceReport, Throughput, VariantResult
from agnitra.telemetry.memory import peak_memory, resident_bytes
from agnitra.telemetry.nvml import NvmlSampler, open_reader
from agnitra.telemetry.opcount import count_ops
from agnitra.telemetry.optable import operator_table
from agnitra.telemetry.profile import unit_of_work
from agnitra.telemetry.roofline import compulsory_bytes, roofline
from agnitra.telemetry.signature import software_versions
from agnitra.telemetry.timing import StepClock, summarize, time_calls
from agnitra.pytree import fresh_copy
from agnitra.verify import Tolerances, check_reference, compare, compare_sets, default_threshold, exploring_threshold, renest
from agnitra.verify.perplexity import judge_perplexity, perplexity
from agnitra.verify.retrieval import same_nearest_neighbour

TEXT_CHECK_POSITIONS = 1024  # held-out text positions a decoder's perplexity is judged on by default
from agnitra.workloads.base import Workload, tensor_leaves

Progress = Callable[[str, float], None]  # (message, fraction done)
# Forward calls are timed CALLS_A_ROUND at a time, one variant after another. Each round starts on
# an idle device, so its first call pays the host's launch time in full while the later ones overlap
# it with the device's work: the same number of calls a round, however many runs, keeps a short
# screening run's median the same kind of measurement as a long final run's (on small host-bound
# GPU models the eager baseline moves between runs anyway: search/reference.py). Fewer calls a round
# only where the runs would not make MIN_PAIRED_ROUNDS rounds.
CALLS_A_ROUND = 5


@dataclass
class BenchConfig:
    variants: list[str | Variant] = field(default_factory=lambda: ["eager"])  # names or Variant objects
    runs: int | None = None  # forward: timed calls (default 50); decoders: timed generations (default 5)
    warmup: int | None = None  # forward: calls (default 5); decoders: generations (default 2)
    temperature: float = 0.0
    top_k: int | None = None
    check: bool = True
    op_breakdown: bool = True
    input_sets: int = 4  # forward inputs rotated so repeated runs do not measure a warm cache
    calls_a_round: int = CALLS_A_ROUND  # forward calls timed back to back before the next variant's turn
    threshold: float | None = None  # correctness threshold; None: the metric's default
    tolerances: Tolerances = field(default_factory=Tolerances)
    energy_seconds: float = 1.0  # NVML energy pass per variant (GPU only)
    signature: bool = True  # capture the graph and store the workload signature with the run
    energy: bool = True  # NVML energy pass (GPU); candidate runs of a search skip it
    roofline: bool = True  # count the workload's FLOPs and bytes (candidate runs keep no roofline)
    shape_check: bool = True  # verify at another batch size too, where the original model takes one
    load_probe_s: float = 0.25  # other processes' load measured this long before the run (0: not)
    size_threads: bool = True  # torch's CPU threads sized to the cores other processes leave free
    l2_units: int = 0  # GPU: calls run inside the NVTX range a profiler reads the L2 hit rate of (telemetry/l2.py)

    def resolved(self, decoder: bool) -> "BenchConfig":
        runs = self.runs if self.runs is not None else (5 if decoder else 50)
        warmup = self.warmup if self.warmup is not None else (2 if decoder else 5)
        return BenchConfig(**{**self.__dict__, "runs": runs, "warmup": warmup})


@dataclass
class _Run:
    """One variant's state through the harness."""

    name: str
    result: VariantResult
    prepared: Prepared | None = None
    generator: Generator | None = None
    samples_ms: list[float] = field(default_factory=list)
    rounds: list[list[float]] = field(default_factory=list)  # samples_ms, round by round
    prefill_ms: list[float] = field(default_factory=list)
    run_tokens_per_s: list[float] = field(default_factory=list)
    checked: list[CheckedCall] = field(default_factory=list)  # its verification calls on the held-out sets
    exploring: dict[str, Any] = field(default_factory=dict)  # its outputs on the exploring sets, by name

    @property
    def ok(self) -> bool:
        return self.result.status == "ok"

    def fail(self, exc: BaseException, stage: str) -> None:
        self.result.status = "failed"
        self.result.reason = f"{stage}: {_describe(exc)}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "out of GPU memory"
    return first_line(exc)


def _main_rows(outputs: list[Any]) -> torch.Tensor:
    """The first tensor of each held-out set's output, stacked: one row per input row."""
    return torch.cat([tensor_leaves(o)[0].float() for o in outputs])


def _free_cuda(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


class Harness:
    def __init__(self, workload: Workload, device: torch.device, device_report: DeviceReport, config: BenchConfig, progress: Progress | None = None) -> None:
        self.workload = workload
        self.device = device
        self.device_report = device_report
        self.decoder = workload.decoder
        self.config = config.resolved(self.decoder is not None)
        self.progress = progress or (lambda message, fraction: None)
        self.variants = [v if isinstance(v, Variant) else get_variant(v) for v in self.config.variants]
        self.runs = [_Run(v.name, VariantResult(name=v.name, status="ok")) for v in self.variants]
        self.notes: list[str] = []
        self.plan: InputPlan | None = None  # chosen when the run starts (runs the original model)
        self.input_sets: list[tuple] = [workload.example_inputs]
        self.machine = MachineWatch(device, self.config.load_probe_s, self.config.size_threads)
        self.reference_problem: str | None = None  # NaN/Inf in the reference's own output, or a model that cannot be verified
        self.reference_run: _Run | None = None  # the variant candidates are verified against
        self.noise_floor: dict[str, Any] | None = None  # random-weight decoders: float32 vs the run's precision
        self.prompt = self._prompt(0) if self.decoder else None

    # ---- stages -------------------------------------------------------------------------

    def run(self) -> BenchReport:
        with torch.no_grad(), self.machine.sized():
            self._plan_inputs()
            self._prepare_all()
            with self.machine.timing():
                self._time_all()
            self._measure_memory()
            self._measure_energy()
            self._mark_l2()
            if self.config.check:
                self._check_correctness()
            roof = self._roofline() if self.config.roofline else None
            ops = self._op_breakdown() if self.config.op_breakdown else []
            workload_info = self._workload_info()
        self._finish(roof)
        self._note_machine()
        return BenchReport(
            workload=workload_info,
            device=self.device_report,
            conditions=self._conditions(),
            variants=[r.result for r in self.runs],
            roofline=roof,
            op_breakdown=ops,
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            versions=software_versions(),
            notes=self.notes,
        )

    def _plan_inputs(self) -> None:
        self.progress("choosing held-out inputs", 0.0)
        self.plan = plan_inputs(self.workload, self.config.input_sets, self.config.shape_check and self.config.check)
        self.input_sets = self.plan.rotation
        self.notes += self.plan.notes
        if self._copy_inputs:
            self.notes.append(f"the model changes its inputs in place ({', '.join(self.plan.behaviour.mutated_inputs)}): every call gets its own copies, "
                              "the copy inside every variant's time")

    def _prepare_all(self) -> None:
        for i, (variant, run) in enumerate(zip(self.variants, self.runs)):
            self.progress(f"preparing {run.name}", i / max(1, len(self.runs)) * 0.3)
            t0 = time.perf_counter()
            try:
                run.prepared = variant.prepare(self.workload, self.device)
                run.result.build_s = round(time.perf_counter() - t0, 3)
                if self.decoder:
                    p = run.prepared
                    model = p.model if p.model is not None else self.workload.model
                    run.generator = Generator(model, self.config.temperature, self.config.top_k)
                self._warm_up(run)
            except NotApplicable as exc:
                run.result.status, run.result.reason = "skipped", str(exc)
            except Exception as exc:  # noqa: BLE001 - a variant that crashes is a record, not the end
                run.fail(exc, "setup")
                _free_cuda(self.device)
            run.result.setup_s = round(time.perf_counter() - t0, 3)
            if run.prepared and run.prepared.notes:
                self.notes.append(f"{run.name}: {run.prepared.notes}")

    def _warm_up(self, run: _Run) -> None:
        for _ in range(self.config.warmup):
            self._one_unit(run, 0)
        _sync(self.device)

    def _one_unit(self, run: _Run, i: int, clock: StepClock | None = None):
        if self.decoder:
            return run.generator.generate(self.prompt, self.decoder.max_new_tokens, clock=clock)
        inputs = self.input_sets[i % len(self.input_sets)]
        return run.prepared.call(*(fresh_copy(inputs) if self._copy_inputs else inputs))

    @property
    def _copy_inputs(self) -> bool:
        """A model that changes its inputs in place gets copies on every call (in every variant's time)."""
        behaviour = self.plan.behaviour if self.plan else None
        return bool(behaviour and behaviour.mutates_inputs)

    def _time_all(self) -> None:
        total = self.config.runs
        chunk = 1 if self.decoder else max(1, min(self.config.calls_a_round, total // MIN_PAIRED_ROUNDS))
        rounds = math.ceil(total / chunk)
        for r in range(rounds):
            count = min(chunk, total - r * chunk)
            order = self.runs[r % len(self.runs):] + self.runs[: r % len(self.runs)]  # rotate who goes first
            for run in order:
                if not run.ok:
                    continue
                self.progress(f"timing {run.name} (round {r + 1}/{rounds})", 0.3 + 0.5 * r / rounds)
                try:
                    self._time_chunk(run, count, r * chunk)
                except Exception as exc:  # noqa: BLE001
                    run.fail(exc, "timed run")
                    _free_cuda(self.device)

    def _time_chunk(self, run: _Run, count: int, offset: int) -> None:
        if not self.decoder:
            samples = time_calls(lambda i: self._one_unit(run, offset + i), count, self.device)
        else:
            samples = []
            for _ in range(count):
                clock = StepClock(self.device)
                clock.mark()
                self._one_unit(run, 0, clock)
                intervals = clock.intervals_ms()  # [prefill, step 1, ..., step n-1]
                steps = intervals[1:]
                run.prefill_ms.append(intervals[0])
                samples += steps
                run.run_tokens_per_s.append(self.decoder.batch * len(steps) / (sum(steps) / 1e3))
        run.samples_ms += samples
        run.rounds.append(samples)

    def _measure_memory(self) -> None:
        for run in self.runs:
            if not run.ok:
                continue
            self.progress(f"peak memory of {run.name}", 0.82)
            try:
                run.result.peak_memory_bytes, kind = peak_memory(lambda: self._one_unit(run, 0), self.device)
            except Exception as exc:  # noqa: BLE001
                run.fail(exc, "memory pass")
                continue
            self.memory_kind = kind
            model = self._variant_model(run)
            try:
                run.result.model_bytes = resident_bytes(model, self.device) if model is not None else None
            except Exception as exc:  # noqa: BLE001 - the model's size is a figure, not a reason to lose the variant
                self.notes.append(f"{run.name}: its weights' size is not known ({first_line(exc)})")

    def _variant_model(self, run: _Run) -> torch.nn.Module | None:
        """The module a variant runs (a decoder's own model when the variant keeps it), None for
        runtimes outside torch (ONNX Runtime) whose weights torch does not hold."""
        from agnitra.ort.session import OrtModule

        prepared = run.prepared
        model = prepared.model if prepared.model is not None else (self.workload.model if self.decoder else prepared.call)
        if not isinstance(model, torch.nn.Module) or any(isinstance(m, OrtModule) for m in model.modules()):
            return None  # ONNX Runtime holds its own copy of the weights, which torch does not see
        return model

    def _mark_l2(self) -> None:
        """Calls made inside the NVTX range whose kernels ncu profiles (telemetry/l2.py): without a
        profiler attached the range is only a marker."""
        if not self.config.l2_units or self.device.type != "cuda":
            return
        from agnitra.telemetry.l2 import L2_RANGE

        for run in self.runs:
            if run.ok:
                with torch.cuda.nvtx.range(L2_RANGE):
                    for i in range(self.config.l2_units):
                        self._one_unit(run, i)
                    _sync(self.device)

    def _measure_energy(self) -> None:
        if not self.config.energy:
            return
        reader, reason = open_reader(self.device)
        if reader is None:
            self.notes.append(f"energy: not measured ({reason})")
            return
        for run in self.runs:
            if not run.ok:
                continue
            self.progress(f"energy of {run.name}", 0.86)
            units, t0 = 0, time.perf_counter()
            with NvmlSampler(reader) as sampler:
                while time.perf_counter() - t0 < self.config.energy_seconds:
                    self._one_unit(run, units)
                    units += 1
                    if units % 8 == 0:
                        _sync(self.device)
                _sync(self.device)
            s = sampler.summary()
            items = units * self._items_per_unit()
            run.result.energy_j_per_item = s.energy_j / items if s.energy_j is not None and items else None
            run.result.power_w, run.result.utilization = s.power_mean_w, s.utilization_mean

    def _items_per_unit(self) -> int:
        if self.decoder:
            return self.decoder.batch * self.decoder.max_new_tokens
        return self.workload.batch

    # ---- correctness ---------------------------------------------------------------------

    def _check_correctness(self) -> None:
        outputs: dict[str, list[Any]] = {}  # each variant's output per held-out set (decoders: one)
        for run in self.runs:
            if not run.ok:
                continue
            self.progress(f"checking {run.name}", 0.9)
            try:
                outputs[run.name] = self._check_outputs(run)
            except Exception as exc:  # noqa: BLE001
                run.fail(exc, "correctness run")
                _free_cuda(self.device)
        if not outputs:
            return
        reference_run = self.reference_run = next(run for run in self.runs if run.name in outputs)
        reference = outputs[reference_run.name]
        self.reference_problem = self.plan.behaviour.unverifiable() if self.plan.behaviour else None
        self.reference_problem = self.reference_problem or check_reference(reference)
        if self.reference_problem:
            self.notes.append(self.reference_problem)
        elif self.decoder and self.workload.weights == "random":
            self._measure_noise_floor(reference[0])
        shape_reference = self._shape_reference(reference_run)
        for run in self.runs:
            if run is reference_run:
                run.result.correctness = self._reference_correctness()
                if self._metric() == "perplexity" and not self.reference_problem:
                    run.result.correctness.details["perplexity"] = perplexity(reference[0], self._check_targets())
            elif run.name in outputs:
                run.result.correctness = self._verify(run, reference_run.name, reference, outputs[run.name], shape_reference)

    def _measure_noise_floor(self, reference_logits: torch.Tensor) -> None:
        """Random weights: what float32 against the run's precision does on the same positions."""
        from agnitra.bench.noise_floor import noise_floor

        self.progress("noise floor of the random weights", 0.92)
        try:
            self.noise_floor = noise_floor(self.workload, reference_logits, self._check_windows(), self.device)
        except Exception as exc:  # noqa: BLE001 - a floor we cannot measure is said, not fatal
            self.noise_floor = {"measured": False, "reason": _describe(exc)}
            _free_cuda(self.device)
        floor = self.noise_floor
        if floor.get("measured"):
            self.notes.append(f"random weights: the noise floor on these positions ({floor['comparison']}) is logit SQNR {floor['sqnr_db']:.1f} dB, "
                              f"next-token agreement {floor['token_agreement']:.3f}; judge each candidate's figures against it")
        else:
            self.notes.append(f"random weights: noise floor not measured ({floor['reason']})")

    def _reference_correctness(self) -> Correctness:
        details: dict[str, Any] = {"role": "reference", "shape_check": self.plan.shape.details()}
        if self.reference_problem:
            details["error"] = self.reference_problem
        return Correctness(self._metric(), None, self.reference_problem is None, None, details, status="reference")

    def _verify(self, run: _Run, reference_name: str, reference: list[Any], outputs: list[Any], shape_reference: Any) -> Correctness:
        """The variant's outputs against the reference's, leaf by leaf, then at the other shape."""
        if self.reference_problem:
            result = Correctness(self._metric(), None, False, None, {"error": self.reference_problem})
        else:
            pairs = [(ref, self._as_reference_structure(run, ref, out)) for ref, out in zip(reference, outputs)]
            if self._metric() == "perplexity":
                result = judge_perplexity(reference[0], outputs[0], self._check_targets(), self.config.tolerances,
                                          window=self.decoder.max_new_tokens if self.decoder else None)
            else:
                result = compare_sets(self._metric(), pairs, self.config.threshold, self.config.tolerances)
                self._check_retrieval(result, reference, outputs)
                self._check_accuracy(result, reference, outputs)
                self._note_task_checks(run.name, result)
                if result.passed:
                    self._verify_input_changes(run, result)
                if result.passed:
                    self._verify_exploring(run, result)
            if result.passed and shape_reference is not None:
                self._verify_other_shape(run, shape_reference, result)
        result.details["reference"] = reference_name
        result.details.setdefault("shape_check", self.plan.shape.details())
        if not result.passed and not run.result.reason:
            run.result.reason = f"verification: {result.details.get('error', 'failed')}"
        return result

    def _verify_input_changes(self, run: _Run, result: Correctness) -> None:
        problem = input_changes_problem(self.reference_run.checked, run.checked)
        if problem:
            result.passed = False
            result.details["error"] = problem

    def _verify_exploring(self, run: _Run, result: Correctness) -> None:
        """Each exploring set on its own (a frozen branch answers wrongly on one of them); lossy
        variants there against the looser threshold (verify.exploring_threshold)."""
        metric, lossy = self._metric(), run.prepared.lossy
        figures = {}
        for name, reference in self.reference_run.exploring.items():
            output = self._as_reference_structure(run, reference, run.exploring[name])
            own = self.config.threshold if self.config.threshold is not None else self.config.tolerances.threshold(metric)
            own = own if own is not None else default_threshold(metric, *(t.dtype for t in tensor_leaves(reference)[:1]))
            check = compare(metric, reference, output, exploring_threshold(metric, own, lossy), self.config.tolerances)
            figures[name] = {"value": check.value, "threshold": check.threshold, "passed": check.passed}
            if not check.passed and result.passed:
                result.passed = False
                result.details["error"] = f"on the {name} inputs: {check.details.get('error', 'differs')} (the held-out sets passed: an answer that depends on the input's values)"
        if figures:
            result.details["exploring"] = figures

    def _check_retrieval(self, result: Correctness, reference: list[Any], outputs: list[Any]) -> None:
        """Embeddings of real sentences (check_inputs): does each keep its nearest neighbour?
        Reported always; required where the user gave --min-retrieval."""
        if self._metric() != "cosine" or self.workload.check_inputs is None:
            return
        ref, cand = _main_rows(reference), _main_rows(outputs)
        if ref.dim() != 2 or ref.shape != cand.shape or ref.shape[0] < 3:
            return
        retrieval = same_nearest_neighbour(ref, cand)
        result.details["retrieval"] = retrieval
        required = self.config.tolerances.min_retrieval
        if result.passed and required is not None and retrieval["same_nearest_neighbour"] < required:
            result.passed = False
            result.details["error"] = (f"retrieval: {retrieval['same_nearest_neighbour']:.3f} of the {retrieval['items']} sentences keep "
                                       f"their nearest neighbour < {required}")

    def _check_accuracy(self, result: Correctness, reference: list[Any], outputs: list[Any]) -> None:
        """Classifiers with labelled check data: the original's accuracy and the candidate's, reported."""
        labels = self.workload.check_labels
        if self._metric() != "top1" or labels is None or self.workload.check_inputs is None:
            return
        ref, cand = _main_rows(reference), _main_rows(outputs)
        labels = labels.reshape(-1)[: ref.shape[0]].to("cpu")
        if ref.dim() != 2 or ref.shape != cand.shape or labels.numel() != ref.shape[0]:
            return
        result.details["accuracy"] = {"labels": int(labels.numel()), "original": (ref.argmax(-1) == labels).double().mean().item(),
                                      "candidate": (cand.argmax(-1) == labels).double().mean().item()}

    def _note_task_checks(self, name: str, result: Correctness) -> None:
        """The retrieval and accuracy figures in the report's notes, beside the metric."""
        retrieval, accuracy = result.details.get("retrieval"), result.details.get("accuracy")
        if retrieval:
            kept = round(retrieval["same_nearest_neighbour"] * retrieval["items"])
            self.notes.append(f"{name}: {kept} of {retrieval['items']} sentences keep their nearest neighbour")
        if accuracy:
            self.notes.append(f"{name}: accuracy {accuracy['candidate']:.4f} on {accuracy['labels']} labelled rows (the original's {accuracy['original']:.4f})")

    def _shape_reference(self, reference_run: _Run) -> Any:
        """The reference variant's output at the other batch size; None where none is checked."""
        shape = self.plan.shape
        if shape.batch is None or self.reference_problem:
            return None
        try:
            return self._call_on_cpu(reference_run, shape.inputs)
        except Exception as exc:  # noqa: BLE001
            self.plan.shape = ShapeCheck(said=f"not checked: the reference variant {reference_run.name} fails at batch {shape.batch}: {_describe(exc)}")
            return None

    def _verify_other_shape(self, run: _Run, reference: Any, result: Correctness) -> None:
        shape = self.plan.shape
        try:
            output = self._call_on_cpu(run, shape.inputs)
        except Exception as exc:  # noqa: BLE001 - a candidate that only runs at the example's shape
            _free_cuda(self.device)
            error = f"fails at batch {shape.batch}, which the original accepts: {_describe(exc)}"
        else:
            check = compare(self._metric(), reference, self._as_reference_structure(run, reference, output), self.config.threshold, self.config.tolerances)
            error = "" if check.passed else f"at batch {shape.batch}: {check.details.get('error', 'differs')}"
        result.details["shape_check"] = shape.details(passed=not error)
        if error:
            result.passed = False
            result.details["error"] = error

    def _call_on_cpu(self, run: _Run, inputs: tuple) -> Any:
        """One call's output on its own copies of the inputs, copied to the CPU."""
        return checked_call(run.prepared.call, inputs).output

    @staticmethod
    def _as_reference_structure(run: _Run, reference: Any, output: Any) -> Any:
        """ONNX Runtime sessions return the model's tensors as one flat tuple: put back in the
        reference's structure before comparing leaf by leaf."""
        from agnitra.ort.session import OrtModule

        return renest(reference, output) if isinstance(run.prepared.call, OrtModule) else output

    def _metric(self) -> str:
        return self.workload.verified_by

    def _check_outputs(self, run: _Run) -> list[Any]:
        if self.decoder:
            return [torch.cat([run.generator.teacher_forced_logits(prompt, reference) for prompt, reference in self._check_windows()], dim=1).to("cpu")]
        run.checked = [checked_call(run.prepared.call, inputs) for inputs in self.plan.held_out]
        run.exploring = {name: checked_call(run.prepared.call, inputs).output for name, inputs in self.plan.exploring}
        return [call.output for call in run.checked]

    def _check_windows(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(prompt, teacher tokens) windows covering `check_positions` decode positions: the first
        with the timed prompt, the others with fresh prompts (seeded: every variant sees the same)."""
        spec = self.decoder
        default = TEXT_CHECK_POSITIONS if self.workload.text_windows else spec.max_new_tokens
        positions = self.config.tolerances.check_positions or default
        count = -(-positions // spec.max_new_tokens)
        if self.workload.text_windows:  # held-out text: its prompts, and its own continuations to teacher-force
            return [tuple(t.to(self.device) for t in self.workload.text_windows(i)) for i in range(count)]
        windows = []
        for i in range(count):
            prompt = self.prompt if i == 0 else random_prompt(spec.batch, spec.prompt_len, spec.vocab_size, 100 + i, self.device)
            windows.append((prompt, random_prompt(spec.batch, spec.max_new_tokens, spec.vocab_size, 1 + i, self.device)))
        return windows

    def _prompt(self, index: int) -> torch.Tensor:
        """The timed generation's prompt: held-out text where the workload has it, else seeded random tokens."""
        if self.workload.text_windows:
            return self.workload.text_windows(index)[0].to(self.device)
        spec = self.decoder
        return random_prompt(spec.batch, spec.prompt_len, spec.vocab_size, index, self.device)

    def _check_targets(self) -> torch.Tensor:
        """The next tokens the teacher-forced logits predict: the windows' continuations, on the CPU."""
        return torch.cat([reference for _, reference in self._check_windows()], dim=1).to("cpu")

    def _check_description(self) -> str:
        n, length = len(self._check_windows()), self.decoder.max_new_tokens
        windows = f" ({n} prompts x {length})" if n > 1 else ""
        text = "held-out text: perplexity and " if self.workload.text_windows else ""
        return f"{text}teacher-forced logits over {n * length} positions{windows} x batch {self.decoder.batch}"

    # ---- roofline and operators -------------------------------------------------------------

    def _roofline(self):
        inputs = self.workload.example_inputs
        fn = unit_of_work(self.workload)
        try:
            with torch.no_grad():
                costs = count_ops(fn, *inputs)
                outputs = fn(*inputs)
        except Exception as exc:  # noqa: BLE001
            self.notes.append(f"roofline: not computed ({_describe(exc)})")
            return None
        self._costs = costs
        flops = sum(c.flops for c in costs)
        kv_positions = self.decoder.prompt_len + self.decoder.max_new_tokens / 2 if self.decoder else 0.0
        nbytes = compulsory_bytes(self.workload.model, inputs, outputs, kv_positions)
        unit = "one decode step (mean KV position)" if self.decoder else "one call"
        notes = f"per {unit}"
        cache = self.device_report.signature.get("l3_bytes") or self.device_report.signature.get("l2_bytes")
        if cache and nbytes <= cache:
            notes += f"; the {nbytes / 1e6:.0f} MB working set fits in the {cache / 2**20:.0f} MiB last-level cache, so the DRAM-bandwidth floor is not a bound here (fractions above 1 are possible)"
        return roofline(flops, nbytes, self.device_report.ceilings, self.workload.dtype, notes=notes)

    def _op_breakdown(self):
        self.progress("operator breakdown (eager)", 0.95)
        try:
            return operator_table(unit_of_work(self.workload), self.workload.example_inputs, self.device, runs=5, warmup=2, costs=getattr(self, "_costs", None))
        except Exception as exc:  # noqa: BLE001
            self.notes.append(f"operator breakdown: not measured ({_describe(exc)})")
            return []

    # ---- assembly ------------------------------------------------------------------------

    def _finish(self, roof) -> None:
        reference = next((run for run in self.runs if run.ok and run.rounds), None)
        for run in self.runs:
            if not run.ok or not run.samples_ms:
                continue
            res = run.result
            res.latency_ms = summarize(run.samples_ms)
            res.round_ms = run.rounds
            if run is not reference:
                verdict = faster_beyond_noise(reference.rounds, run.rounds)
                res.speedup_interval, res.faster_beyond_noise = verdict.interval(), verdict.faster
            if self.decoder:
                tps = float(np.median(run.run_tokens_per_s))
                res.throughput = Throughput(tps, "tokens/s")
                res.decode = DecodeStats(
                    tokens_per_s=tps,
                    per_token_ms=res.latency_ms,
                    prefill_ms=float(np.median(run.prefill_ms)),
                    new_tokens=self.decoder.max_new_tokens,
                    prompt_len=self.decoder.prompt_len,
                    batch=self.decoder.batch,
                )
            else:
                res.throughput = Throughput(self.workload.batch / (res.latency_ms.median / 1e3), f"{self.workload.item_unit}/s")
            if roof and run.prepared.arithmetic:
                self.notes.append(f"{run.name}: no roofline fraction ({run.prepared.arithmetic} arithmetic; the floor uses the {roof.dtype} matmul ceiling)")
            elif roof:
                res.roofline_fraction = roof.floor_ms / res.latency_ms.median

    def _round_cvs(self) -> dict[str, float | None]:
        return {run.name: round_cv(run.rounds) for run in self.runs if run.ok and run.rounds}

    def _note_machine(self) -> None:
        note = self.machine.note(self._round_cvs())
        if note:
            self.notes.append(note)

    def _verification(self) -> dict[str, Any]:
        """What correctness was checked on, for the report's conditions."""
        checks = self.plan.checks()
        if self.decoder:
            checks["held_out"] = self._check_description()
        return {**checks, "reference_problem": self.reference_problem}

    def _workload_info(self) -> dict[str, Any]:
        w = self.workload
        return {
            "name": w.name,
            "source": w.source,
            "task": w.task.value,
            "comparison": self._metric(),
            "params": w.param_count(),
            "dtype": str(w.dtype).replace("torch.", ""),
            "description": w.description,
            "weights": w.weights,
            "signature": self._signature(),
        }

    def _signature(self) -> dict[str, Any] | None:
        """The workload signature (untimed, so deterministic), kept with the run for later search."""
        if not self.config.signature:
            return None
        from agnitra.ir import capture_workload, signature

        self.progress("workload signature", 0.98)
        try:
            return signature(capture_workload(self.workload)).to_dict()
        except Exception as exc:  # noqa: BLE001 - a model that does not capture still benchmarks
            self.notes.append(f"signature: not computed ({_describe(exc)})")
            return None

    def _conditions(self) -> dict[str, Any]:
        c = self.config
        shapes = [list(t.shape) for t in tensor_leaves(self.workload.example_inputs)]
        cond = {
            "batch": self.decoder.batch if self.decoder else self.workload.batch,
            "shapes": shapes,
            "dtype": str(self.workload.dtype).replace("torch.", ""),
            "runs": c.runs,
            "warmup": c.warmup,
            "interleaved": True,
            "timer": "cuda events" if self.device.type == "cuda" else "perf_counter",
            "input_sets": len(self.input_sets),
            "threads": self.machine.threads,
            "peak_memory": getattr(self, "memory_kind", None),
            "machine": self.machine.conditions(self._round_cvs()),
        }
        if c.check and self.plan is not None:
            cond["verification"] = self._verification()
        if self.decoder:
            cond.update(
                mode="decode",
                prompt_len=self.decoder.prompt_len,
                new_tokens=self.decoder.max_new_tokens,
                temperature=c.temperature,
                top_k=c.top_k,
                runs_unit="generations",
                prefill="eager in every variant, timed apart",
                correctness=self._check_description(),
            )
            if self.noise_floor is not None:
                cond["noise_floor"] = self.noise_floor
        else:
            cond.update(mode="forward", runs_unit="calls")
        return cond


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def benchmark(workload: Workload, device: torch.device, device_report: DeviceReport, config: BenchConfig, progress: Progress | None = None) -> BenchReport:
    return Harness(workload, device, device_report, config, progress).run()

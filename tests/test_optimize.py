"""agnitra.optimize: recipes, the patcher's rollback, isolation of bad candidates, the
never-slower rule, save/load and resume."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch import nn

import agnitra
from compile_default import COMPILE_DEFAULT
from pages import assert_self_contained
from agnitra.errors import UserError
from agnitra.transforms.base import TRANSFORMS, Transform, TransformContext, register_transform
from agnitra.transforms.patcher import PatchError, apply_recipe
from agnitra.transforms.recipe import Recipe
from agnitra.transforms.wrappers import ModelWrapper
from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, build_workload


class _Slow(ModelWrapper):
    def forward(self, *args):
        time.sleep(0.004)
        return self.inner(*args)


class _Nan(ModelWrapper):
    def forward(self, *args):
        return self.inner(*args) * float("nan")


def _register(name, apply, stage="module", lossy=False):
    if name not in TRANSFORMS:
        body = {"name": name, "stage": stage, "description": "test transform", "apply": lambda self, model, ctx, params: apply(model),
                "lossy": lambda self, params: lossy}
        register_transform(type(f"Test_{name}", (Transform,), body))


def _boom(model):
    raise RuntimeError("boom in apply")


def _scale_weights(model):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m._parameters["weight"] = nn.Parameter(m.weight.detach() * 2, requires_grad=False)
    return model


_register("test-slow", _Slow)
_register("test-nan", _Nan)
_register("test-crash", _boom)
_register("test-double", _scale_weights)
_register("test-lossy-double", _scale_weights, lossy=True)
_register("test-lossy-same", lambda model: model, lossy=True)
_register("test-slow-build", lambda model: time.sleep(0.3) or model)
BUILT: list[str] = []  # what test-runtime-after was applied to, test by test


def _sticky(model):
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def _make_fast(model):
    model.fast = True
    return model


_register("test-sticky", _sticky)
_register("test-fast", _make_fast)


class _Sleepy(nn.Module):
    """A model with a slow forward unless a transform made it fast."""

    def __init__(self) -> None:
        super().__init__()
        self.linear, self.fast = nn.Linear(32, 8), False

    def forward(self, x):
        if not self.fast:
            time.sleep(0.004)
        return self.linear(x)


def _sleepy() -> Workload:
    torch.manual_seed(0)
    make = lambda seed: (torch.randn(4, 32, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("sleepy", _Sleepy().eval(), make(0), TaskKind.GENERIC, batch=4, make_inputs=make)
_register("test-runtime-after", lambda model: BUILT.append("built") or model, stage="runtime")


def _mlp() -> Workload:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    make = lambda seed: (torch.randn(4, 32, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    return Workload("mlp", model, make(0), TaskKind.GENERIC, batch=4, make_inputs=make)


def test_recipe_json_round_trip_and_validation(tmp_path):
    recipe = Recipe.of(("precision", {"dtype": "bf16"}), ("compile", {"mode": "default"}))
    path = recipe.save(tmp_path / "recipe.json")
    again = Recipe.load(path)
    assert [s.transform for s in again.steps] == ["precision", "compile"]
    assert again.steps[1].params == {"mode": "default", "freezing": False, "pdl": True, "dynamic": False, "coordinate_descent": True}  # defaults filled in
    for doc, message in [
        ({"version": "agnitra.recipe/1", "steps": [{"transform": "warp-drive"}]}, "unknown transform"),
        ({"version": "agnitra.recipe/1", "steps": [{"transform": "precision", "params": {"bits": 3}}]}, "no parameter"),
        ({"version": "agnitra.recipe/1", "steps": [{"transform": "precision", "params": {"dtype": 16}}]}, "should be str"),
        ({"version": "other/2", "steps": []}, "not an agnitra.recipe/1"),
    ]:
        with pytest.raises(UserError, match=message):
            Recipe.from_dict(doc)
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(UserError, match="not valid JSON"):
        Recipe.load(tmp_path / "bad.json")


def test_inline_recipe_parses_back_from_its_label(tmp_path):
    recipe = Recipe.parse("int4-weight-only(group_size=64) + compile(mode=reduce-overhead,freezing=true)")
    assert recipe.steps[0].params["group_size"] == 64 and recipe.steps[1].params == {"mode": "reduce-overhead", "freezing": True, "pdl": True, "dynamic": False, "coordinate_descent": True}
    assert Recipe.parse(recipe.name) == recipe  # the label is a valid inline recipe
    assert Recipe.load_or_parse(str(recipe.save(tmp_path / "r.json"))) == recipe
    for text, message in [("warp-drive", "unknown transform"), ("compile(mode=default", "cannot read recipe step"), ("compile(bits=3)", "no parameter")]:
        with pytest.raises(UserError, match=message):
            Recipe.parse(text)


def test_patch_failure_leaves_the_original_untouched():
    w = _mlp()
    before = [(id(p), p.clone()) for p in w.model.parameters()]
    modules_before = list(w.model.children())
    with pytest.raises(PatchError, match="test-crash: RuntimeError: boom in apply"):
        apply_recipe(Recipe.of("test-double", "test-crash"), TransformContext(w, torch.device("cpu")))
    assert list(w.model.children()) == modules_before
    for (pid, value), p in zip(before, w.model.parameters()):
        assert id(p) == pid and torch.equal(p, value)  # test-double changed only the copy


def test_patched_model_is_a_drop_in_copy():
    w = _mlp()
    x = w.example_inputs[0]
    patched = apply_recipe(Recipe.of("test-double", ("precision", {"dtype": "bf16"})), TransformContext(w, torch.device("cpu")))
    out = patched.model(x)
    assert out.dtype == torch.float32 and out.shape == (4, 8)  # outputs keep the original dtype
    assert w.model[0].weight.dtype == torch.float32  # the user's weights stay fp32
    assert isinstance(patched.model, nn.Module)


def test_runtime_before_module_transform_is_rejected():
    w = _mlp()
    with pytest.raises(UserError, match="before a module transform"):
        apply_recipe(Recipe.of("compile", "test-double"), TransformContext(w, torch.device("cpu")))


def test_never_slower_returns_the_original(tmp_path):
    w = _mlp()
    fast = agnitra.optimize(w, device="cpu", transforms=["test-slow"], budget="60s", peers=[], out=tmp_path)
    assert fast.recipe.steps == ()
    report = fast.report
    assert report.chosen is None and "original model is returned" in report.verdict
    slow = next(c for c in report.candidates if c.name == "test-slow")
    assert slow.status == "ok" and slow.speedup < 1.0
    x = w.example_inputs[0]
    assert torch.equal(fast(x), w.model(x))
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["schema"] == "agnitra.optimize/1" and saved["chosen"] is None
    page = (tmp_path / "report.html").read_text()
    assert "original model is returned" in page and "test-slow" in page and "Candidates: latency vs model memory" in page
    assert_self_contained(page)
    assert (tmp_path / "candidates.csv").read_text().splitlines()[0].startswith("candidate,status,speedup")


def test_a_sticky_device_error_replaces_the_worker_and_the_next_candidate_runs(tmp_path):
    """An illegal memory access leaves a CUDA context unusable for everything after it in that
    process (simulated here by its message): the worker says so and exits after answering, the
    candidate is blamed with its cause, and the next candidate runs in a fresh worker."""
    fast = agnitra.optimize(_sleepy(), device="cpu", strategy="enumerate", transforms=["test-sticky", "test-fast"], budget="90s", peers=[], out=tmp_path)
    by_name = {c.name: c for c in fast.report.candidates}
    assert by_name["test-sticky"].status == "failed" and "illegal memory access" in by_name["test-sticky"].reason
    assert by_name["test-fast"].passed and by_name["test-fast"].speedup > 1.0  # 4 ms sleep skipped; a loaded CI core left 1.5x once
    assert fast.report.search["worker_starts"] >= 2
    assert any(n.startswith("worker: started afresh after") and "sticky device error" in n for n in fast.report.search["notes"])
    assert fast.report.chosen == "test-fast"


def test_without_a_final_run_the_answer_is_the_best_verified_candidate(tmp_path, monkeypatch):
    """The budget ends before the final run can run: the best verified candidate of the search is
    the answer, with its own run's figures, never the original model."""
    import agnitra.search.optimize as run

    monkeypatch.setattr(run, "_final", lambda *args: (None, "no time was left of the 90 s budget"))
    fast = agnitra.optimize(_sleepy(), device="cpu", strategy="enumerate", transforms=["test-fast", "test-slow"], budget="90s", peers=[], out=tmp_path)
    report = fast.report
    assert report.chosen == "test-fast" and fast.recipe.steps[0].transform == "test-fast"
    searched = next(c for c in report.candidates if c.name == "test-fast")
    assert report.speedup == searched.speedup > 1.0  # the search run's own figure, whatever the load made of it
    assert "faster than the baseline in its own run of the search" in report.verdict
    assert "not confirmed in a final run (no time was left of the 90 s budget)" in report.verdict
    assert report.search["first_improvement_s"] is not None and report.search["first_improvement_s"] <= report.search["elapsed_s"]
    assert json.loads((tmp_path / "recipe.json").read_text())["steps"][0]["transform"] == "test-fast"
    x = _sleepy().example_inputs[0]
    assert torch.allclose(fast(x), _sleepy().model(x))


def test_crashing_and_nan_candidates_do_not_end_the_run(tmp_path):
    w = _mlp()
    fast = agnitra.optimize(w, device="cpu", transforms=["test-crash", "test-nan", "test-slow"], budget="60s", peers=[], out=tmp_path)
    by_name = {c.name: c for c in fast.report.candidates}
    assert by_name["test-crash"].status == "failed" and "boom in apply" in by_name["test-crash"].reason
    nan = by_name["test-nan"]
    assert nan.status == "ok" and not nan.passed and "NaN" in nan.correctness.details["error"]
    assert "test-slow" in by_name  # measured after the failures
    assert fast.report.chosen is None
    header, *lines = (tmp_path / "candidates.jsonl").read_text().splitlines()
    assert json.loads(header)["schema"] == "agnitra.journal/1"
    assert len(lines) == len(fast.report.candidates)


def test_resume_reuses_measured_candidates(tmp_path):
    w = _mlp()
    first = agnitra.optimize(w, device="cpu", transforms=["test-slow", "test-nan"], budget="60s", peers=[], out=tmp_path)
    journal = (tmp_path / "candidates.jsonl").read_text()
    again = agnitra.optimize(w, device="cpu", transforms=["test-slow", "test-nan"], budget="60s", peers=[], out=tmp_path, resume=True)
    assert (tmp_path / "candidates.jsonl").read_text() == journal  # nothing measured twice
    assert [c.speedup for c in again.report.candidates] == [c.speedup for c in first.report.candidates]


@pytest.mark.slow
def test_tinylm_optimize_saves_a_recipe_that_reloads_identically(tmp_path):
    # compiled decode steps are what must reload identically; the compile peers would only repeat them
    fast = agnitra.optimize("zoo:tinylm", device="cpu", size="tiny", tokens=6, seq_len=4, transforms=[COMPILE_DEFAULT], peers=[], budget="3m", out=tmp_path)
    report = fast.report
    assert report.candidates and all(c.status in ("ok", "failed", "skipped", "timeout") for c in report.candidates)
    assert (tmp_path / "recipe.json").is_file() and (tmp_path / "report.html").is_file()
    loaded = agnitra.load(tmp_path, "zoo:tinylm", device="cpu", size="tiny")
    assert loaded.recipe == fast.recipe
    prompt = torch.randint(0, 256, (1, 4), generator=torch.Generator().manual_seed(3))
    assert torch.equal(fast.generate(prompt, 5), loaded.generate(prompt, 5))
    baseline = build_workload("tinylm", BuildOptions(size="tiny", tokens=6, seq_len=4))
    if fast.recipe.steps:
        assert report.speedup > 1.0 and report.chosen is not None
    else:
        assert "original model is returned" in report.verdict
    assert baseline.model.output.weight.dtype == torch.float32


def test_compiled_code_is_forgotten_after_each_candidate(monkeypatch):
    """Each candidate compiles the same code objects; TorchDynamo keeps only a few versions of one
    and then refuses (fullgraph) or runs eagerly, so the search resets it after every candidate."""
    import torch._dynamo

    from agnitra import api
    from agnitra.search.space import Candidate
    from agnitra.search.tuner import SearchConfig, evaluate

    resets = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    w = _mlp()
    report = api.describe_device(torch.device("cpu"))
    for name in ("test-slow", "test-crash", "test-nan"):
        evaluate(Candidate(Recipe.of(name), 1.0), w, torch.device("cpu"), report, SearchConfig(runs=2, warmup=1))
    assert len(resets) == 3  # after a good, a crashed and a failed candidate alike


@pytest.mark.parametrize("lossy_part, fails", [("test-lossy-double", True), ("test-lossy-same", False)])
def test_a_failing_lossy_part_fails_the_recipe_before_the_rest_is_built(lossy_part, fails):
    """A recipe of a lossy step and a compile-like step after it: the lossy step is verified alone
    first; where it fails, the recipe is failed verification with that reason and the step after
    it is never built; where it passes, the whole recipe is built, timed and verified."""
    from agnitra import api
    from agnitra.search.space import Candidate
    from agnitra.search.tuner import SearchConfig, evaluate

    BUILT.clear()
    recipe = Recipe.of(lossy_part, "test-runtime-after")
    result = evaluate(Candidate(recipe, 1.0), _mlp(), torch.device("cpu"), api.describe_device(torch.device("cpu")), SearchConfig(runs=2, warmup=1))
    assert result.status == "ok" and result.passed is not fails
    if fails:
        assert BUILT == [] and result.latency_ms is None and result.speedup is None
        assert result.reason.startswith(f"verification of its lossy part alone, {lossy_part}:") and "test-runtime-after not built" in result.reason
        assert result.correctness.details["verified"].startswith(f"the lossy part alone ({lossy_part})")
    else:
        assert BUILT and result.latency_ms is not None and result.speedup is not None


def test_a_collection_times_every_recipe_its_failing_lossy_ones_too():
    """`agnitra collect` gathers the cost model's data: a recipe whose lossy part fails is built,
    timed and recorded as failed verification with its speed (SearchConfig.lossy_part_first off)."""
    from agnitra import api
    from agnitra.search.space import Candidate
    from agnitra.search.tuner import SearchConfig, evaluate

    BUILT.clear()
    recipe = Recipe.of("test-lossy-double", "test-runtime-after")
    config = SearchConfig(runs=2, warmup=1, lossy_part_first=False)
    result = evaluate(Candidate(recipe, 1.0), _mlp(), torch.device("cpu"), api.describe_device(torch.device("cpu")), config)
    assert result.status == "ok" and not result.passed and BUILT and result.speedup is not None
    assert result.reason.startswith("verification:")


def test_exclude_transforms_keeps_them_out_of_the_search(tmp_path):
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["test-slow", "test-nan"], exclude_transforms=["test-nan"], budget="60s", peers=[], out=tmp_path)
    assert [c.name for c in fast.report.candidates] == ["test-slow"]


def test_memory_objective_ranks_by_the_candidates_own_weights():
    """A run's peak holds the baseline's tensors too, so a candidate sharing them all (nothing new
    allocated) would look smallest by peak; the memory objective ranks by the model's own weights."""
    from agnitra.results import CandidateResult, Correctness
    from agnitra.search.ranking import rank

    ok = Correctness(metric="logits", value=40.0, passed=True)
    steps = {"steps": [{"transform": "compile", "params": {}}]}
    shared = CandidateResult("bf16 compile", steps, "a", 1.0, "ok", speedup=1.5, peak_memory_bytes=2_300, model_bytes=2_200, correctness=ok)
    int4 = CandidateResult("int4", steps, "b", 1.0, "ok", speedup=1.3, peak_memory_bytes=3_100, model_bytes=800, correctness=ok)
    unknown = CandidateResult("ort", steps, "c", 1.0, "ok", speedup=1.2, peak_memory_bytes=2_250, correctness=ok)  # weights outside torch: its peak
    assert [r.name for r in rank([shared, int4, unknown], "memory")] == ["int4", "bf16 compile", "ort"]
    assert [r.name for r in rank([shared, int4, unknown], "latency")] == ["bf16 compile", "int4", "ort"]


def test_options_come_grouped_or_one_by_one_not_both(tmp_path):
    grouped = agnitra.optimize(_mlp(), device="cpu", search=agnitra.SearchSettings(budget="60s", transforms=["test-slow"], peers=[]), tolerances=agnitra.Tolerances(max_error=0.01), out=tmp_path / "a")
    flat = agnitra.optimize(_mlp(), device="cpu", budget="60s", transforms=["test-slow"], peers=[], max_error=0.01, out=tmp_path / "b")
    for fast in (grouped, flat):
        assert [c.name for c in fast.report.candidates] == ["test-slow"] and fast.report.search["budget_s"] == 60.0
        assert fast.report.candidates[0].correctness.threshold == 0.01
    with pytest.raises(UserError, match=r"give search either as search=SearchSettings\(...\) or as budget=, not both"):
        agnitra.optimize(_mlp(), device="cpu", search=agnitra.SearchSettings(), budget="60s")
    with pytest.raises(UserError, match="tolerances must be a Tolerances, not dict"):
        agnitra.optimize(_mlp(), device="cpu", tolerances={"max_error": 0.1})


def test_peers_are_candidates_the_opener_first_the_others_in_turn_and_one_that_cannot_fit_is_named():
    """On a GPU plain compile goes first; the other peers take turns while their share of the
    search's seconds allows, cheapest first; a peer expected past the time left is not started
    and is named with its expected seconds."""
    from agnitra.search.peers import PEER_SHARE, PeerQueue

    queue = PeerQueue.of(["compile-max-autotune", "onnxruntime", "compile", "compile-reduce-overhead"], [], "cuda")
    assert [p.name for p in queue.pending] == ["compile", "onnxruntime", "compile-reduce-overhead", "compile-max-autotune"]
    assert queue.due(0.0, strategy_done=False).name == "compile"  # the opener, at once
    queue.measured(queue.pending[0], 60.0)  # twice what was expected: the other compile modes are expected to take longer too
    assert queue.due(60.0, strategy_done=False) is None  # the strategy's turn: 60 s of 60 on peers
    assert queue.due(60.0 / PEER_SHARE + 1, strategy_done=False).name == "onnxruntime"
    assert queue.expected(queue.pending[-1]) == pytest.approx(2 * 120.0)
    assert queue.expected(queue.pending[0]) == pytest.approx(25.0)  # ONNX Runtime: not a compile
    queue.leave_out(queue.pending[-1], "expected to take 240 s, 100 s were left")
    assert queue.due(61.0, strategy_done=True).name == "onnxruntime"  # once the strategy is done, the peers go on
    assert "compile-max-autotune (expected to take 240 s" in queue.note()
    cpu = PeerQueue.of(["compile", "onnxruntime-int8"], [], "cpu")
    assert cpu.opener is None and cpu.due(0.0, strategy_done=False) is None  # on the CPU the store's recommendation opens


def _passing(name: str, speedup: float | None, passed: bool = True, status: str = "ok", peer: str | None = None):
    from agnitra.results import CandidateResult, Correctness, Latency

    latency = Latency(median=1.0 / speedup, p95=1.1, min=0.9, mean=1.0, samples=20) if speedup else None
    steps = [{"transform": "threads", "params": {"count": len(name)}}]
    return CandidateResult(name, {"steps": steps}, name, 1.0, status, latency_ms=latency, baseline_ms=1.0 if speedup else None, speedup=speedup,
                           correctness=Correctness("rel_error", 1e-6 if passed else 1.0, passed, 1e-3) if status == "ok" else None,
                           faster_beyond_noise=None if speedup is None else speedup > 1.05, eval_s=2.0, peer=peer)


SCRIPT = [("a", 0.9, True), ("b", 1.5, True), ("c", 3.0, False), ("d", 1.2, True), ("e", None, False), ("f", 2.0, True), ("g", 1.8, True)]


@pytest.mark.parametrize("stop_after", range(1, len(SCRIPT) + 1))
def test_a_search_stopped_at_any_point_holds_the_best_verified_candidate_so_far(stop_after):
    """The budget ends after `stop_after` candidates (the next one would not fit): the outcome's best
    is the fastest verified candidate that beat the baseline among those measured, never a failed
    one, and it only improves as the search goes on."""
    from agnitra.search.budget import Budget
    from agnitra.search.space import Candidate
    from agnitra.search.strategies.enumerate import Enumerate
    from agnitra.search.tuner import SearchConfig, search
    from agnitra.transforms.recipe import Recipe, Step

    by_name = {name: _passing(name, speedup, passed, "ok" if speedup else "failed") for name, speedup, passed in SCRIPT}
    space = [Candidate(Recipe((Step("threads", {"count": i + 1}),)), 1.0) for i in range(len(SCRIPT))]
    names = {c.recipe.key(): name for c, (name, _, _) in zip(space, SCRIPT)}
    budget = Budget(100.0)

    class Runner:
        calls = 0

        def ensure_started(self, limit):
            pass

        def call(self, fn, candidate, device_report, config, timeout):
            Runner.calls += 1
            if Runner.calls == stop_after:
                budget.started -= 1000  # the budget is spent while this candidate runs
            result = by_name[names[candidate.recipe.key()]]
            return _passing(result.name, result.speedup, result.correctness is not None and result.correctness.passed, result.status)

    outcome = search(Enumerate(space), Runner(), None, SearchConfig(), budget, lambda results: 5.0)
    measured = SCRIPT[:stop_after]
    good = [(speedup, name) for name, speedup, passed in measured if passed and speedup and speedup > 1.05]
    assert len(outcome.results) == stop_after
    assert (outcome.best.name if outcome.best else None) == (max(good)[1] if good else None)


def test_an_interrupted_search_keeps_its_best_and_says_so():
    from agnitra.search.budget import Budget
    from agnitra.search.space import Candidate
    from agnitra.search.strategies.enumerate import Enumerate
    from agnitra.search.tuner import SearchConfig, search
    from agnitra.transforms.recipe import Recipe, Step

    space = [Candidate(Recipe((Step("threads", {"count": n}),)), 1.0) for n in (1, 2, 3)]

    class Runner:
        def ensure_started(self, limit):
            pass

        def call(self, fn, candidate, device_report, config, timeout):
            if candidate is space[1]:
                raise KeyboardInterrupt
            return _passing("one", 2.0)

    outcome = search(Enumerate(space), Runner(), None, SearchConfig(), Budget(100.0), lambda results: 5.0)
    assert isinstance(outcome.interrupted, KeyboardInterrupt) and outcome.best.name == "one"
    assert any(n.startswith("interrupted (KeyboardInterrupt) after 1 candidate(s)") for n in outcome.notes)


def test_a_family_that_failed_verification_waits_behind_every_other_recipe():
    from agnitra.search.space import Candidate
    from agnitra.search.strategies.enumerate import Enumerate
    from agnitra.search.strategies.family import FamilyGate
    from agnitra.transforms.recipe import Recipe, Step

    fp8 = [Candidate(Recipe((Step("fp8", {"scaling": s}),)), 2.0) for s in ("tensor", "row", "block")]
    graphs = Candidate(Recipe((Step("cuda-graphs", {"warmup": 3}),)), 1.0)
    gate = FamilyGate(Enumerate(fp8 + [graphs]))
    first = gate.ask()
    assert first is fp8[0]
    gate.tell(first, _passing("fp8", 1.5, passed=False))  # ran, failed verification
    assert gate.ask() is graphs  # the family's other members wait
    assert [gate.ask(), gate.ask(), gate.ask()] == [fp8[1], fp8[2], None]  # until nothing else is left
    assert "family gate: 2 candidate(s)" in gate.learned_notes()[-1]


def test_auto_puts_lossless_recipes_first_without_a_cost_model():
    from agnitra.search.space import Candidate
    from agnitra.search.strategies.auto import pass_first
    from agnitra.transforms.recipe import Recipe, Step

    lossy = Candidate(Recipe((Step("int8-weight-only", {}),)), 3.0)
    compiled = Candidate(Recipe((Step("compile", {"mode": "default"}),)), 1.5)
    assert pass_first([lossy, compiled]) == [compiled, lossy]


def test_a_decoders_final_run_reserve_holds_what_its_final_run_took():
    """llama-1b decode on the H100: the baseline run took 40 s and the finalist's search run 52.4 s;
    the final run of the baseline, the peer and the finalist needed about 125 s."""
    from agnitra.results import CandidateResult, Correctness, Latency, VariantResult
    from agnitra.search.budget import Budget
    from agnitra.search.final_reserve import FinalReserve

    latency = Latency(median=1.25, p95=1.3, min=1.2, mean=1.26, samples=254)
    baseline = [VariantResult("eager", "ok", latency_ms=latency, setup_s=3.0)]
    finalist = CandidateResult("triton-kernels + compile", {"steps": [{"transform": "triton-kernels", "params": {}}]}, "k", 1.0, "ok", latency_ms=Latency(median=19.3, p95=20, min=19, mean=19.4, samples=254),
                               baseline_ms=32.3, speedup=1.67, correctness=Correctness("logits", 25.0, True, 20.0), eval_s=52.4, setup_s=40.0)
    budget = Budget(360.0)
    decoder = FinalReserve(40.0, baseline, budget, gpu=True, restart_s=1.0, decoder=True)([finalist])
    forward = FinalReserve(40.0, baseline, budget, gpu=True, restart_s=1.0)([finalist])
    assert decoder >= 125.0 and decoder > forward


def test_after_a_stopped_candidate_the_final_run_is_reserved_for_cold_compiles():
    """bart on the CPU (2 min): the last candidate was stopped at the reserve's edge, the final run
    started a fresh worker, and its two finalists' compiles (18.7 s and 17.4 s in the search) did
    not fit the 27 s left. A candidate stopped after the finalists makes the reserve count their
    compiles cold; the limit of one at the budget's edge keeps that much back beforehand."""
    from agnitra.results import CandidateResult, Correctness, Latency, VariantResult
    from agnitra.search.budget import Budget
    from agnitra.search.final_reserve import FinalReserve

    latency = Latency(median=1.2, p95=1.3, min=1.1, mean=1.2, samples=30)
    baseline = [VariantResult("eager", "ok", latency_ms=latency, setup_s=0.5)]

    def done(name: str, eval_s: float, speedup: float) -> CandidateResult:
        ms = Latency(median=1.8 / speedup, p95=2.0, min=1.0, mean=1.8 / speedup, samples=30)
        return CandidateResult(name, {"steps": [{"transform": "compile", "params": {"n": name}}]}, name, 1.0, "ok", latency_ms=ms, baseline_ms=1.8, speedup=speedup,
                               correctness=Correctness("rel_error", 1e-7, True, 1e-3), eval_s=eval_s, setup_s=eval_s - 1.0)

    results = [done("a", 18.7, 1.56), done("b", 17.4, 1.5), done("c", 3.0, 1.1)]
    reserve = FinalReserve(5.0, baseline, Budget(120.0), gpu=False, restart_s=2.0)
    stopped = results + [CandidateResult("d", {"steps": []}, "d", 1.0, "timeout", reason="ran past its time limit")]
    warm, cold = reserve(results), reserve(stopped)
    assert cold > warm + 15  # a worker killed after the finalists: their compiles counted cold from then on
    assert reserve(results[:1] + [stopped[-1]] + results[1:]) == cold  # one finalist measured before the kill is enough
    assert reserve([stopped[-1]] + results) == warm  # killed before any finalist was measured: they ran in the worker that is up


def test_a_candidate_at_the_budgets_edge_gets_what_the_reserve_leaves_and_nothing_to_confirm_reserves_nothing():
    from agnitra.results import CandidateResult, Latency, VariantResult
    from agnitra.search.budget import Budget
    from agnitra.search.final_reserve import ANSWER_S, FinalReserve
    from agnitra.search.space import Candidate
    from agnitra.search.strategies.enumerate import Enumerate
    from agnitra.search.tuner import SearchConfig, search
    from agnitra.transforms.recipe import Recipe, Step

    limits = []

    class Runner:
        def ensure_started(self, limit):
            pass

        def call(self, fn, candidate, device_report, config, timeout):
            limits.append(round(timeout))
            return CandidateResult(candidate.recipe.name, candidate.recipe.to_dict(), candidate.recipe.key(), 1.0, "ok", speedup=1.0)

    space = [Candidate(Recipe((Step("threads", {"count": n}),)), 1.0) for n in (1, 2)]
    search(Enumerate(space), Runner(), None, SearchConfig(candidate_timeout_s=300.0), Budget(100.0), lambda results: 40.0)
    assert limits == [60, 60]  # the budget less the reserve: stopped there, the best verified result is the answer
    limits.clear()
    search(Enumerate(space), Runner(), None, SearchConfig(candidate_timeout_s=10.0), Budget(100.0), lambda results: 40.0)
    assert limits == [10, 10]  # a candidate's own limit well inside the budget: unchanged
    latency = Latency(median=30.0, p95=31, min=29, mean=30, samples=20)
    reserve = FinalReserve(35.0, [VariantResult("eager", "ok", latency_ms=latency, setup_s=1.0)], Budget(120.0), gpu=True, decoder=True)
    assert reserve([]) == ANSWER_S  # no final run before anything passed: the opener gets the whole budget


def test_the_report_says_where_the_budget_went(tmp_path):
    fast = agnitra.optimize(_mlp(), device="cpu", transforms=["test-slow-build"], peers=[], budget="60s", out=tmp_path)
    search = fast.report.search
    assert list(search["time_s"]) == ["loading", "original model", "search", "final run", "answer"]
    assert sum(search["time_s"].values()) == pytest.approx(search["elapsed_s"], abs=0.5)
    built = next(c for c in fast.report.candidates if c.name == "test-slow-build")
    assert 0.3 <= built.build_s <= built.setup_s  # building it, of its whole setup
    note = next(n for n in search["notes"] if n.startswith("time: loading "))
    assert f"the search kept {search['reserved_for_final_s']:.1f} s for the final run and the answer" in note and note.endswith("s of the 60 s budget not used")
    assert search["reserved_for_final_s"] >= 0.3  # building the answer again takes about what building it took


def test_the_final_reserve_counts_a_worker_start_only_where_none_is_up_and_the_answers_build():
    """tinylm on the CPU (60 s): a flat 5 s for building the answer, which took 0.1 s, and a
    worker restart counted when the worker was up, left 21 s of the budget unused."""
    from agnitra.results import CandidateResult, Correctness, Latency, VariantResult
    from agnitra.search.budget import Budget
    from agnitra.search.final_reserve import ANSWER_S, COLD_EVAL, SAFETY, FinalReserve

    latency = Latency(median=1.0, p95=1.1, min=0.9, mean=1.0, samples=30)
    baseline = [VariantResult("eager", "ok", latency_ms=latency, setup_s=0.1)]

    def done(name: str, build_s: float | None, setup_s: float) -> CandidateResult:
        return CandidateResult(name, {"steps": [{"transform": "compile", "params": {}}]}, name, 1.0, "ok", latency_ms=Latency(median=0.5, p95=0.6, min=0.4, mean=0.5, samples=30), baseline_ms=1.0,
                               speedup=2.0, correctness=Correctness("rel_error", 1e-7, True, 1e-3), setup_s=setup_s, build_s=build_s, eval_s=setup_s + 1.0)

    up = [True]
    reserve = FinalReserve(4.0, baseline, Budget(60.0), gpu=False, restart_s=20.0, running=lambda: up[0])
    lazy = [done("compile", 0.02, 12.0)]  # compiled at its first call: its build is quick
    assert reserve.assembly(lazy) == pytest.approx(ANSWER_S + COLD_EVAL * 0.02)
    assert reserve.assembly([done("graphs", 9.0, 12.0)]) == pytest.approx(ANSWER_S + COLD_EVAL * 9.0)  # captured (and compiled) as it is built
    assert reserve.assembly([done("resumed", None, 12.0)]) == pytest.approx(ANSWER_S + COLD_EVAL * 12.0)  # not recorded apart: its whole setup
    warm = reserve(lazy)
    up[0] = False  # the last candidate was stopped: the final run starts a worker
    assert reserve(lazy) == pytest.approx(warm + SAFETY * 20.0)


@pytest.mark.parametrize("strategy", ["random", "tpe", "nsga2", "auto"])
def test_other_strategies_search_verify_and_report(tmp_path, strategy):
    fast = agnitra.optimize(_mlp(), device="cpu", strategy=strategy, transforms=["threads", "test-double", "test-nan"], peers=[], budget="60s", out=tmp_path)
    report = fast.report
    assert report.search["strategy"] == strategy and report.candidates
    assert all(not c.passed for c in report.candidates if c.name.startswith(("test-double", "test-nan")))
    assert json.loads((tmp_path / "report.json").read_text())["search"]["strategy"] == strategy


def test_an_unknown_strategy_is_refused_before_any_work():
    with pytest.raises(UserError, match=r"--strategy: unknown strategy 'annealing'; use one of: auto, enumerate, llm, model, nsga2, ppo, random, tpe"):
        agnitra.optimize(_mlp(), device="cpu", strategy="annealing", budget="60s")


def test_the_final_run_lineup_is_cut_to_the_time_left_keeping_the_best():
    """A final run that cannot hold the whole lineup runs a smaller one (the other finalists go
    first, then ONNX Runtime, then the compile mode) rather than none, and keeps the best result."""
    from agnitra.search.budget import Budget
    from agnitra.search.optimize import fitting_lineup

    best, second = _passing("own", 3.0), _passing("own2", 2.5)
    compiled, ort = _passing("compile", 2.0, peer="compile"), _passing("onnxruntime", 1.5, peer="onnxruntime")
    notes: list[str] = []
    needed = lambda lineup: 20.0 * (1 + len(lineup))  # noqa: E731 - each variant 20 s, the baseline too
    compared, finalists = fitting_lineup([compiled, ort], [best, second], best, needed, Budget(61.0), notes)
    assert (compared, finalists) == ([compiled], [best])  # 60 s: the baseline, the compile mode and the best
    assert notes and notes[0].startswith("final run: own2, onnxruntime left out to fit the")
    compared, finalists = fitting_lineup([compiled, ort], [best, second], best, needed, Budget(30.0), [])
    assert (compared, finalists) == ([], [best])  # nothing left to drop but the best: the caller decides whether it fits


def test_without_a_winning_candidate_the_fastest_verified_peer_is_kept_for_the_answer():
    """make demo at 3 minutes on the 2-core VM: no own recipe won, the compile mode passed at 1.17x
    in its search run, and the final run could not fit: the compile mode, not the original, is
    kept in the lineup and is the answer taken from the search."""
    from agnitra.search.budget import Budget
    from agnitra.search.optimize import fastest_verified_peer, fitting_lineup

    compiled, ort = _passing("compile", 1.17, peer="compile"), _passing("onnxruntime", 2.5, passed=False, peer="onnxruntime")
    slower = _passing("compile-max", 1.02, peer="compile-max-autotune")
    kept = fastest_verified_peer([slower, ort, compiled, _passing("own", 0.5)])
    assert kept is compiled and fastest_verified_peer([slower, ort]) is None  # 1.02x is within the noise, ORT failed
    needed = lambda lineup: 20.0 * (1 + len(lineup))  # noqa: E731
    assert fitting_lineup([compiled, ort], [], kept, needed, Budget(30.0), []) == ([compiled], [])


def test_the_final_run_confirms_a_win_its_search_run_had_beyond_the_noise_and_names_a_compile_mode_left_out():
    """MiniLM on the CPU at 5 minutes: the compile recipe ran 1.20x beyond the noise in its search
    run and 1.14x (0.94-1.25) in the final run; the original was returned. Two runs faster, one
    beyond the noise, keep the answer; one slower by its median does not."""
    from agnitra.results import BenchReport, Correctness, Latency, VariantResult
    from agnitra.search.optimize import _choose
    from agnitra.search.verdict import win_verdict

    def variant(name, ms, beyond):
        return VariantResult(name, "ok", latency_ms=Latency(median=ms, p95=ms, min=ms, mean=ms, samples=50), correctness=Correctness("cosine", 1.0, True, 0.99),
                             speedup_interval=[0.94, 1.25], faster_beyond_noise=beyond)

    bench = BenchReport(device={}, workload={}, conditions={}, variants=[variant("eager", 43.1, None), variant("compiled", 37.8, False), variant("slower", 44.0, False)])
    assert _choose(bench, ["compiled", "slower"], "latency") is None
    chosen = _choose(bench, ["compiled", "slower"], "latency", {"compiled", "slower"})
    assert chosen.name == "compiled"  # "slower" is slower by its median: never the answer
    searched = [_passing("compile", 1.3, peer="compile")]
    line = win_verdict(bench, chosen, [], searched)
    assert "within the noise in the final run, beyond it in its own search run" in line
    assert "the fastest compile mode, compile, ran 1.30x in its own search run (not in the final run)" in line and "no peer measured" not in line


def test_once_no_final_run_can_fit_the_rest_of_the_budget_goes_to_the_search():
    """llama-1b decode, 5 min on an H200: the search ended with 83 s left where the smallest final
    run needed ~129 s, so the final run was skipped and 27.5% of the budget went unused. From the
    moment not even the baseline and the best can be run again, only the answer is kept back."""
    from agnitra.results import CandidateResult, Correctness, Latency, VariantResult
    from agnitra.search.budget import Budget
    from agnitra.search.final_reserve import FinalReserve

    baseline = [VariantResult("eager", "ok", latency_ms=Latency(median=18.5, p95=19, min=18, mean=18.5, samples=50), setup_s=3.0)]
    best = CandidateResult("compile", {"steps": [{"transform": "compile", "params": {}}]}, "c", 1.0, "ok", latency_ms=Latency(median=5.4, p95=6, min=5, mean=5.4, samples=50),
                           baseline_ms=18.5, speedup=3.43, correctness=Correctness("logits", 30.0, True, 20.0), eval_s=70.0, setup_s=45.0, build_s=0.5)
    roomy = FinalReserve(40.0, baseline, Budget(600.0), gpu=True, restart_s=5.0, decoder=True)
    kept = roomy([best])
    assert kept > 60 and roomy.given_up is None and roomy.note() == ""  # time enough: the final run keeps its room
    tight = FinalReserve(40.0, baseline, Budget(50.0), gpu=True, restart_s=5.0, decoder=True)
    assert tight([]) == tight.assembly([])  # nothing passed: nothing to confirm
    assert tight([best]) == pytest.approx(tight.assembly([best]))  # the final run cannot fit: only the answer is kept
    assert tight.given_up is not None and tight.note().startswith("final run: even the smallest one needed about")
    assert tight([best]) == pytest.approx(tight.assembly([best]))  # and it stays given up


def test_once_an_answer_is_held_a_peer_is_capped_like_a_candidate():
    """bert-base b32, 5 min on an H200: with a verified 3.1x answer held, compile-max-autotune ran to
    its 130-s limit, 43% of the budget, and pushed the faster compile-reduce-overhead out of the
    final run. A peer started after an answer is held gets the same share a candidate does."""
    from agnitra.results import CandidateResult, Correctness
    from agnitra.search.budget import Budget
    from agnitra.search.peers import PeerQueue
    from agnitra.search.space import Candidate
    from agnitra.search.strategies.enumerate import Enumerate
    from agnitra.search.tuner import CANDIDATE_SHARE, SearchConfig, search
    from agnitra.transforms.recipe import Recipe, Step

    limits = {}

    class Runner:
        def ensure_started(self, limit):
            pass

        def call(self, fn, candidate, device_report, config, timeout):
            limits[candidate.recipe.name] = round(timeout)
            return CandidateResult(candidate.recipe.name, candidate.recipe.to_dict(), candidate.recipe.key(), 1.0, "ok", speedup=3.0,
                                   correctness=Correctness("rel_error", 1e-6, True, 1e-3), faster_beyond_noise=True)

    space = [Candidate(Recipe((Step("threads", {"count": 1}),)), 1.0)]
    outcome = search(Enumerate(space), Runner(), None, SearchConfig(candidate_timeout_s=900.0), Budget(1000.0), lambda results: 0.0,
                     peers=PeerQueue.of(["compile-max-autotune"], space, "cpu"))
    first, peer = list(limits.values())
    assert first > 900 * 0.9 and peer == round(CANDIDATE_SHARE * 1000)  # the first, with nothing held, is not capped
    assert any("each candidate and peer had at most 200 s" in note for note in outcome.notes)

"""benchmarks/budget_curve.py: the commands it runs, what it reads from a report.json, its summary,
its lanes and deadline, and its Hugging Face factories as `agnitra optimize` loads them (CPU, no run)."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("budget_curve", ROOT / "benchmarks" / "budget_curve.py")
bc = importlib.util.module_from_spec(_spec)
sys.modules["budget_curve"] = bc
_spec.loader.exec_module(bc)


def test_budgets_parse_and_sort():
    assert bc.parse_budgets("5m,90s,1") == [("1", 1.0), ("90s", 90.0), ("5m", 300.0)]
    assert bc.parse_budget("1.5m") == 90.0
    with pytest.raises(SystemExit):
        bc.parse_budgets("two minutes")
    with pytest.raises(SystemExit):
        bc.parse_budgets(" , ")


def test_workloads_become_the_users_flags():
    work = bc.parse_workload("zoo:bert-base@b32", "cuda", "base")
    assert (work.spec, work.flags) == ("zoo:bert-base", ["--batch", "32", "--seq-len", "128", "--dtype", "fp16"])
    assert bc.parse_workload("zoo:llama-1b", "cuda", "base").flags == ["--batch", "1", "--seq-len", "32", "--tokens", "128", "--dtype", "bf16"]
    assert bc.parse_workload("zoo:resnet50@b64", "cpu", "small").flags == ["--batch", "64"]  # fp32 on the CPU: no --dtype
    assert bc.parse_workload("zoo:minilm", "cpu", "small").flags == ["--min-cosine", "0.99"]
    with pytest.raises(SystemExit):
        bc.parse_workload("zoo:minilm", "cuda", "base")
    roberta = bc.parse_workload("hf:roberta", "cuda", "base")
    assert roberta.spec.endswith("budget_curve.py:hf_roberta") and roberta.flags == ["--batch", "8", "--seq-len", "128", "--dtype", "fp16"]
    assert bc.parse_workload("hf:mistral", "cuda", "base").flags[:4] == ["--batch", "4", "--seq-len", "128"]
    assert bc.parse_workload("hf:vit@b2", "cpu", "small").flags == ["--batch", "2", "--size", "small"]  # images: no --seq-len
    assert bc.parse_workload("hf:whisper-encoder", "cpu", "tiny").spec.endswith(":hf_whisper_encoder")
    for bad in ("hf:nope", "zoo:bert-base@32", "bert-base"):
        with pytest.raises(SystemExit):
            bc.parse_workload(bad, "cpu", "small")
    plan = bc.Plan(roberta, "2m", 120.0)
    assert bc.command_of(plan, "cuda", Path("/r/x")) == ["agnitra", "optimize", roberta.spec, "--device", "cuda", *roberta.flags, "--budget", "2m", "--out", "/r/x", "--json"]


def test_every_family_has_a_factory_the_loader_finds():
    fams = bc.families()
    assert set(bc.FAMILY_NAMES) == set(fams.FAMILIES) and len(bc.FAMILY_NAMES) >= 12
    assert all(callable(getattr(bc, bc.factory_name(name), None)) for name in fams.FAMILIES)


def test_the_cli_loads_a_factory_and_its_model_travels_by_value(monkeypatch):
    """As `agnitra optimize benchmarks/budget_curve.py:hf_distilbert --size tiny --batch 2` loads it; the
    worker gets the workload pickled, and finds neither benchmarks/ nor hf_families on its path."""
    import cloudpickle

    from agnitra.workloads.loaders import load_workload
    from agnitra.workloads.registry import BuildOptions

    path = list(sys.path)
    workload = load_workload(f"{ROOT / 'benchmarks' / 'budget_curve.py'}:hf_distilbert", BuildOptions(batch=2, seq_len=16, size="tiny"))
    assert tuple(workload.example_inputs[0].shape) == (2, 16) and workload.batch == 2 and workload.weights == "random"
    assert sys.path == path  # benchmarks/ not added: transformers would import benchmarks/kernels.py as `kernels`
    for name in [n for n in sys.modules if n.startswith("agnitra_user_")]:
        cloudpickle.register_pickle_by_value(sys.modules[name])  # as the worker's pickler does
    data = cloudpickle.dumps(workload)
    for name in ["hf_families", *[n for n in sys.modules if n.startswith("agnitra_user_")]]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    copy = cloudpickle.loads(data)
    with torch.no_grad():
        assert torch.equal(copy.model(*copy.example_inputs), workload.model(*workload.example_inputs))


def test_base_size_is_the_served_shape():
    for name, want in (("vit", (16, 3, 224, 224)), ("convnet", (16, 3, 224, 224))):
        assert tuple(bc.build_family(name, "base").example_inputs[0].shape) == want
    assert bc.BASE_OF["distilbert"][0] == bc.BASE["encoder"][0] == 768 and bc.BASE["decoder"][0] == 1024
    with pytest.raises(ValueError):
        bc.build_family("vit", "small", seq_len=64)
    with pytest.raises(ValueError):
        bc.build_family("roberta", "huge")


def _variant(name, ms, passed=True, interval=None, status="ok"):
    return {"name": name, "status": status, "latency_ms": {"median": ms}, "correctness": {"passed": passed}, "speedup_interval": interval}


def _report(chosen="mine", variants=None, candidates=None, speedup=None, **search):
    variants = variants if variants is not None else [
        _variant("eager", 10.0), _variant("compile", 5.0), _variant("compile-reduce-overhead", 4.0),
        _variant("compile-max-autotune", 3.0, passed=False),  # faster, but failed verification: no bar
        _variant("onnxruntime", 8.0), _variant("mine", 3.5, interval=[2.7, 2.95])]
    return {"chosen": chosen, "speedup": speedup if speedup is not None else (10.0 / 3.5 if chosen else 1.0), "recipe": {"steps": [{"transform": "x"}] if chosen else []},
            "candidates": candidates or [], "verdict": "a verdict", "bench": {"variants": variants},
            "search": {"budget_s": 120.0, "elapsed_s": 90.0, "evaluated": 7, "peers": ["compile", "compile-reduce-overhead", "compile-max-autotune", "onnxruntime"], **search}}


def test_a_row_against_the_final_runs_peers():
    row = bc.row_from_report(_report(first_improvement_s=31.5))
    assert (row["answer"], row["answer_kind"]) == ("mine", "own")
    assert row["best_compile"] == "compile-reduce-overhead" and row["compile_from"] == "final run"
    assert row["best_compile_speedup"] == pytest.approx(2.5) and row["speedup_vs_best_compile"] == pytest.approx(2.5 / 2.5 * (10 / 3.5) / 2.5)
    assert set(row["compile_peers"]) == {"compile", "compile-reduce-overhead"}
    assert row["at_least_best_compile"] is True and row["at_least_judged_by"] == "the answer's final-run interval"
    assert row["best_ort"] == "onnxruntime" and row["speedup_vs_best_ort"] == pytest.approx((10 / 3.5) / 1.25)
    assert row["own_beats_best_peer"] is True and row["own_beats_best_peer_beyond_noise"] is True
    assert row["unused_s"] == 30.0 and row["unused_share"] == pytest.approx(0.25) and row["evaluated"] == 7
    assert row["first_improvement_s"] == 31.5 and row["verdict"] == "a verdict"
    assert bc.row_from_report(_report())["first_improvement_s"] is None  # an older report has no such field


def test_within_the_noise():
    slower = [_variant("eager", 10.0), _variant("compile-reduce-overhead", 4.0), _variant("mine", 4.2, interval=[2.3, 2.45])]
    row = bc.row_from_report(_report(variants=slower, speedup=10 / 4.2))
    assert row["at_least_best_compile"] is False and row["own_beats_best_peer"] is False
    reaching = [_variant("eager", 10.0), _variant("compile-reduce-overhead", 4.0), _variant("mine", 4.1, interval=[2.3, 2.6])]
    assert bc.row_from_report(_report(variants=reaching, speedup=10 / 4.1))["at_least_best_compile"] is True
    no_interval = [_variant("eager", 10.0), _variant("compile-reduce-overhead", 4.0), _variant("mine", 4.1)]
    row = bc.row_from_report(_report(variants=no_interval, speedup=10 / 4.1))
    assert row["at_least_best_compile"] is True and row["at_least_judged_by"] == "ratio >= 0.97"  # 0.976
    no_interval[2] = _variant("mine", 4.2)
    assert bc.row_from_report(_report(variants=no_interval, speedup=10 / 4.2))["at_least_best_compile"] is False  # 0.952
    peer = bc.row_from_report(_report(chosen="compile-reduce-overhead", speedup=2.5))
    assert peer["answer_kind"] == "peer" and peer["at_least_best_compile"] is True and peer["own_beats_best_peer"] is False


def test_without_a_final_run_the_searchs_peer_candidates_count():
    candidates = [{"name": "compile(mode=reduce-overhead)", "peer": "compile-reduce-overhead", "status": "ok", "speedup": 2.0, "correctness": {"passed": True}},
                  {"name": "compile", "peer": "compile", "status": "ok", "speedup": 3.0, "correctness": {"passed": False}},
                  {"name": "a + b", "status": "ok", "speedup": 0.8, "correctness": {"passed": True}, "recipe": {"steps": [{"transform": "a"}]}}]
    row = bc.row_from_report(_report(chosen=None, variants=[_variant("eager", 10.0)], candidates=candidates))
    assert row["answer"] == "original" and row["speedup"] == 1.0
    assert row["best_compile"] == "compile-reduce-overhead" and row["compile_from"] == "search" and row["speedup_vs_best_compile"] == pytest.approx(0.5)
    assert row["at_least_best_compile"] is False and row["best_ort"] is None and row["at_least_best_ort"] is None
    assert row["original_though_passed"] is True and row["passed_candidates"] == 2 and row["passed_own_candidates"] == 1 and row["passed_faster_candidates"] == 1
    summary = {"best_compile": {"peer": "compile-max-autotune", "speedup": 1.5}}  # no peer candidate: the search's own summary
    row = bc.row_from_report(_report(chosen=None, variants=[_variant("eager", 10.0)], candidates=candidates[2:], **summary))
    assert row["best_compile"] == "compile-max-autotune" and row["compile_from"] == "search" and row["original_though_passed"] is True
    bare = bc.row_from_report({"chosen": None, "speedup": 1.0, "search": {}, "bench": None})
    assert bare["best_compile"] is None and bare["own_beats_best_peer"] is None and bare["original_though_passed"] is False


def test_summary_per_budget():
    rows = [{"workload": "a", "budget_s": 60.0, **bc.row_from_report(_report())},
            {"workload": "b", "budget_s": 60.0, **bc.row_from_report(_report(chosen=None, candidates=[
                {"name": "x", "status": "ok", "speedup": 1.2, "correctness": {"passed": True}, "recipe": {"steps": [{"transform": "x"}]}}]))},
            {"workload": "c", "budget_s": 60.0, "status": "failed", "error": "exit 1: boom"},
            {"workload": "d", "budget_s": 60.0, **bc.row_from_report(_report()), "status": "killed", "error": "killed, exit -9: the report is partial"},
            {"workload": "a", "budget_s": 300.0, "status": "skipped", "reason": "would not end before the deadline"}]
    s = bc.summarize(rows)
    one = s["60s"]
    assert (one["rows"], one["reported"]) == (4, 2) and one["not_reported"] == {"c": "exit 1: boom", "d": "killed, exit -9: the report is partial"}
    assert one["at_least_best_compile"]["count"] == 1 and one["at_least_best_compile"]["of"] == 2
    assert one["own_beats_best_peer"]["workloads"] == ["a"]
    assert one["original_though_passed"] == {"count": 1, "workloads": ["b"]}
    assert one["mean_unused_share"] == pytest.approx(0.25) and one["answers"]["original"] == ["b"]
    assert s["300s"]["reported"] == 0 and s["300s"]["not_reported"] == {"a": "would not end before the deadline"}
    assert len(bc.summary_lines(s)) == 2


def test_lanes_run_side_by_side_and_the_deadline_skips(tmp_path):
    works = [bc.Work(f"w{i}", f"zoo:w{i}") for i in range(4)]
    plans = [bc.Plan(w, "1m", 60.0) for w in works] + [bc.Plan(works[0], "10m", 600.0)]
    seen, rows, busy, most = [], [], [0], [0]
    lock = threading.Lock()

    def fake(plan, device, lane, gpu, runs, deadline, store, warm, reports):
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
        time.sleep(0.2)
        with lock:
            busy[0] -= 1
            seen.append((plan.work.name, gpu))
        return {"workload": plan.work.name, "budget_s": plan.budget_s, "status": "ok"}

    deadline = time.monotonic() + bc.expected_wall_s(60.0) + 5  # the 1-minute rows fit, the 10-minute one does not
    bc.Runner(plans, "cuda", ["0", "1"], tmp_path, deadline, None, False, None, rows.append, run=fake).run()
    assert sorted(n for n, _ in seen) == ["w0", "w1", "w2", "w3"] and {g for _, g in seen} == {"0", "1"} and most[0] == 2
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert [(r["workload"], r["budget_s"]) for r in skipped] == [("w0", 600.0)] and "deadline" in skipped[0]["reason"]


def test_result_file_plot_and_merge(tmp_path):
    from agnitra.results import DeviceReport

    device = DeviceReport(name="cpu", kind="cpu", signature={}, ceilings={})
    rows = [{"workload": "a", "budget_s": b, "budget": f"{b:g}s", "status": "ok", **bc.row_from_report(_report())} for b in (60.0, 120.0)]
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    bc.write(first, device, {"device": "cpu"}, rows[:1])
    bc.write(second, device, {"device": "cpu"}, rows[1:])
    doc = json.loads(first.read_text())
    assert doc["schema"] == bc.SCHEMA and doc["versions"]["torch"] and doc["rows"][0]["workload"] == "a" and "60s" in doc["summary"]
    merged = json.loads(bc.merge([str(first), str(second)], str(tmp_path / "both.json")).read_text())
    assert [r["budget_s"] for r in merged["rows"]] == [60.0, 120.0] and set(merged["summary"]) == {"60s", "120s"}
    elsewhere = tmp_path / "gpu.json"
    bc.write(elsewhere, DeviceReport(name="NVIDIA H100", kind="cuda", signature={}, ceilings={}), {"device": "cuda"}, rows[1:])
    with pytest.raises(SystemExit):
        bc.merge([str(first), str(elsewhere)], str(tmp_path / "mixed.json"))
    html = tmp_path / "both.html"
    assert str(html) in merged["plots"] and "plotly" in html.read_text()[:5000].lower()

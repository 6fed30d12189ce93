"""The CLI end to end on the CPU: zoo list, profile and bench with --json and --out."""

from __future__ import annotations

import json

from agnitra.cli import main
from agnitra.workloads.registry import zoo_entries


def _cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_zoo_list_shows_every_workload_with_params(capsys):
    code, out, _ = _cli(["zoo", "list"], capsys)
    assert code == 0
    for entry in zoo_entries():
        assert f"zoo:{entry.name}" in out
    assert "8.03B" in out and "1.10B" in out and "15.7M" in out


def test_bench_json_is_one_document(capsys, tmp_path):
    code, out, err = _cli(["bench", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--tokens", "5", "--runs", "2", "--warmup", "1", "--json", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    doc = json.loads(out)  # stdout holds exactly one JSON document
    assert doc["schema"] == "agnitra.bench/1" and doc["workload"]["name"] == "tinylm"
    eager = doc["variants"][0]
    assert eager["status"] == "ok" and eager["decode"]["new_tokens"] == 5
    assert eager["throughput"]["unit"] == "tokens/s" and eager["latency_ms"]["samples"] == 2 * 4
    for name in ("report.json", "metrics.csv", "report.html"):
        assert (tmp_path / name).is_file()
    assert json.loads((tmp_path / "report.json").read_text())["variants"][0]["name"] == "eager"


def test_bench_table_output(capsys):
    code, out, _ = _cli(["bench", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--tokens", "4", "--runs", "2", "--warmup", "1", "--variants", "eager,compile-reduce-overhead"], capsys)
    assert code == 0
    assert "eager" in out and "compile-reduce-overhead" in out and "skipped" in out
    assert "reduce-overhead captures" in " ".join(out.split())  # the reason, whatever the wrapping
    assert "tok/s" in out or "tokens/s" in out
    assert "Operator breakdown of one decode step" in out
    assert "weights and buffers on the device: eager " in out


def test_profile_json(capsys, tmp_path):
    code, out, err = _cli(["profile", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--runs", "5", "--warmup", "1", "--json", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "agnitra.profile/1"
    assert doc["latency_ms"]["samples"] == 5 and doc["total_flops"] > 0
    ops = {row["op"] for row in doc["ops"]}
    assert "aten::mm" in ops
    assert doc["nvml"] is None and "CPU" in doc["nvml_reason"]
    assert abs(sum(row["share"] for row in doc["ops"]) - 1.0) < 1e-6
    assert (tmp_path / "report.html").is_file()


def test_device_command(capsys):
    code, out, _ = _cli(["device", "--device", "cpu", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["kind"] == "cpu" and doc["ceilings"]["copy_gbps"] > 0


def test_inspect_json_and_files(capsys, tmp_path):
    code, out, err = _cli(["inspect", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--runs", "10", "--json", "--out", str(tmp_path)], capsys)  # 3 runs: 0.72 alone, 0.30 once in a busy suite
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "agnitra.inspect/1" and doc["ir"]["schema"] == "agnitra.ir/1"
    assert doc["ir"]["source"] == "export" and doc["ir"]["graph_breaks"] == []
    assert doc["timing"]["attributed_share"] > 0.5
    top = doc["hotspots"][0]
    assert {"module", "kind", "share", "flops", "bytes", "intensity", "bound"} <= set(top)
    assert doc["signature"]["version"] == "agnitra.signature/2" and len(doc["signature"]["values"]) == len(doc["signature"]["names"])
    assert {p.name for p in tmp_path.iterdir()} >= {"inspect.json", "ir.json", "inspect.html"}


def test_inspect_table(capsys):
    code, out, _ = _cli(["inspect", "zoo:resnet50", "--size", "tiny", "--device", "cpu", "--runs", "2"], capsys)
    assert code == 0
    assert "IR from export" in out and "Hotspots" in out and "conv" in out and "graph breaks: none" in out

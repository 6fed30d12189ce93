"""Capture, annotation, time attribution, ONNX import parity and the workload signature."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from agnitra.ir import annotate_bounds, capture, module_hotspots, signature
from agnitra.ir.graph import KINDS
from agnitra.ir.graph import GraphIR
from agnitra.ir.hotspots import covering
from agnitra.ir.timing import attribute_time
from agnitra.workloads.registry import BuildOptions, build_workload, zoo_entries


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 48)
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.norm = torch.nn.LayerNorm(48)

    def forward(self, x, img, q, k, v):
        h = self.norm(self.proj(x))  # [4, 48]
        c = self.conv(img)  # [1, 8, 5, 5]
        a = F.scaled_dot_product_attention(q, k, v)  # [1, 2, 6, 16]
        m = torch.matmul(h, h.t())  # [4, 4]: two activations
        return h, c, a, m


def _block_inputs():
    torch.manual_seed(0)
    return torch.randn(4, 32), torch.randn(1, 3, 10, 10), torch.randn(1, 2, 6, 16), torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 16)


@pytest.fixture(scope="module")
def block_ir() -> GraphIR:
    return capture(Block().eval(), _block_inputs(), "block")


def _only(ir: GraphIR, op: str):
    (node,) = [n for n in ir.nodes if n.op == op]
    return node


def test_linear_node(block_ir):
    node = _only(block_ir, "aten::linear")
    assert node.kind == "matmul" and node.module == "proj" and node.module_type == "Linear"
    assert node.flops == 2 * 4 * 32 * 48
    assert node.bytes_read == 4 * (4 * 32 + 48 * 32 + 48) and node.bytes_written == 4 * 4 * 48
    assert "proj.weight" in node.inputs and node.weight_input


def test_conv_node(block_ir):
    node = _only(block_ir, "aten::conv2d")
    assert node.kind == "conv" and node.module == "conv" and node.output_shapes == [[1, 8, 5, 5]]
    assert node.flops == 2 * 8 * 5 * 5 * 3 * 9


def test_attention_and_activation_matmul(block_ir):
    sdpa = _only(block_ir, "aten::scaled_dot_product_attention")
    assert sdpa.kind == "attention" and sdpa.flops == 4 * 2 * 6 * 9 * 16
    assert sdpa.bytes_written == 4 * 2 * 6 * 16
    mm = _only(block_ir, "aten::matmul")
    assert mm.kind == "attention" and not mm.weight_input and mm.flops == 2 * 4 * 4 * 48


def test_norm_node(block_ir):
    node = _only(block_ir, "aten::layer_norm")
    assert node.kind == "norm" and node.module == "norm"
    assert node.flops == 8 * 4 * 48 and node.bytes_written >= 4 * 4 * 48
    assert node.inputs[0] == _only(block_ir, "aten::linear").name  # the edge from proj


def test_ir_json_round_trip(block_ir):
    doc = json.loads(json.dumps(block_ir.to_dict()))
    assert doc["schema"] == "agnitra.ir/1" and doc["totals"]["nodes"] == len(block_ir.nodes)
    again = GraphIR.from_dict(doc)
    assert again.nodes == block_ir.nodes and again.source == "export"
    with pytest.raises(ValueError):
        GraphIR.from_dict({**doc, "schema": "other/9"})


class DataDependent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        if h.sum() > 0:  # data-dependent branch: export cannot follow it
            return self.b(h)
        return h * 2


def test_data_dependent_control_flow_reports_graph_breaks():
    torch.manual_seed(1)
    ir = capture(DataDependent(), (torch.randn(2, 8),))
    assert ir.source == "dynamo"
    assert ir.graph_breaks, "the data-dependent branch must be reported"
    assert any("test_ir.py" in b.location for b in ir.graph_breaks)
    assert "torch.export failed" in ir.notes[0]
    modules = {n.module for n in ir.nodes if n.kind == "matmul"}
    assert "a" in modules  # the traced nodes still know their modules
    weights = [n for n in ir.nodes if n.op == "aten::addmm"]
    assert weights and all(n.weight_input for n in weights)


@pytest.mark.parametrize("name", [e.name for e in zoo_entries()])
def test_every_zoo_workload_captures(name):
    w = build_workload(name, BuildOptions(size="tiny"))
    ir = capture(w.model, w.example_inputs, name)
    assert ir.source == "export" and not ir.graph_breaks
    assert ir.total_flops > 0 and ir.params == w.param_count()
    compute = [n for n in ir.nodes if n.kind in ("matmul", "conv")]
    assert compute and all(n.module for n in compute)  # owned by a named module


def test_time_attribution_covers_the_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).eval()
    x = torch.randn(512, 256)  # milliseconds of work per module: hook overhead is small beside it
    ir = capture(model, (x,), "mlp")
    attribute_time(ir, model, model, (x,), torch.device("cpu"), runs=5, warmup=1)
    t = ir.timing
    assert t["resource"] == "host" and t["measured_ms"] > 0
    assert t["attributed_share"] > 0.85  # the root Sequential only dispatches
    assert set(t["modules"]) >= {"0", "1", "2"}
    linear = [n for n in ir.nodes if n.op == "aten::linear"]
    assert all(n.time_us > 0 for n in linear)
    assert sum(n.share for n in ir.nodes) <= 1.0 + 1e-6
    spots = module_hotspots(ir, {"copy_gbps": 20.0, "matmul_tflops": {"float32": 0.2}}, torch.float32)
    assert {s.module for s in covering(spots, 0.8)} <= {"0", "1", "2"}
    assert spots[0].kind == "matmul" and spots[0].bound in ("compute", "memory")


def test_bounds_follow_the_ceilings(block_ir):
    annotate_bounds(block_ir, {"copy_gbps": 1000.0, "matmul_tflops": {"float32": 1e-6}}, torch.float32)
    assert _only(block_ir, "aten::linear").bound == "compute"  # a slow matmul unit
    annotate_bounds(block_ir, {"copy_gbps": 0.001, "matmul_tflops": {"float32": 1000.0}}, torch.float32)
    assert _only(block_ir, "aten::linear").bound == "memory"  # a slow memory


@pytest.mark.slow
def test_onnx_export_of_a_zoo_model_has_the_same_operator_mix(tmp_path):
    from agnitra.ir.onnx_import import import_onnx
    from agnitra.ort.export import export_onnx

    w = build_workload("bert-base", BuildOptions(size="tiny"))
    torch_ir = capture(w.model, w.example_inputs, "bert")
    export_onnx(w, tmp_path / "bert.onnx")
    onnx_ir = import_onnx(tmp_path / "bert.onnx", input_shapes={"input_ids": list(w.example_inputs[0].shape), "attention_mask": list(w.example_inputs[1].shape)})
    a, b = torch_ir.op_mix(), onnx_ir.op_mix()
    for kind in ("matmul", "norm"):
        assert a[kind]["count"] == b[kind]["count"], kind
    assert onnx_ir.total_flops == pytest.approx(torch_ir.total_flops, rel=0.01)
    assert a["matmul"]["flops_share"] == pytest.approx(b["matmul"]["flops_share"], abs=0.02)
    attention = lambda mix: mix.get("attention", {}).get("flops_share", 0) + mix.get("softmax", {}).get("flops_share", 0)  # noqa: E731
    assert attention(a) == pytest.approx(attention(b), abs=0.02)
    torch_modules = {n.module for n in torch_ir.nodes if n.kind == "matmul"}
    onnx_modules = {n.module for n in onnx_ir.nodes if n.kind == "matmul"}
    assert torch_modules == onnx_modules  # the same owners, recovered from the exporter's names


def test_signature_is_deterministic_and_fixed_length():
    w = build_workload("bert-base", BuildOptions(size="tiny"))
    first = signature(capture(w.model, w.example_inputs))
    again = signature(capture(build_workload("bert-base", BuildOptions(size="tiny")).model, w.example_inputs))
    other = signature(capture(*_tiny("tinylm")))
    assert first.values == again.values and first.version == "agnitra.signature/2"
    assert len(first.values) == len(other.values) == len(first.names)
    assert first.distance(again) == 0.0 and first.distance(other) > 0.1


def test_the_signature_names_the_workload_not_the_moment():
    """Time shares move with the machine's load: they are kept in `measured`, out of the vector
    and the distance, so two timed inspections of one model give the same signature."""
    from agnitra import api

    first = api.inspect("zoo:tinylm", device="cpu", size="tiny", runs=2, warmup=1).signature
    again = api.inspect("zoo:tinylm", device="cpu", size="tiny", runs=3, warmup=0).signature
    assert first["values"] == again["values"] and first["names"] == again["names"]
    assert not any(name.startswith("time_share") or name == "timed" for name in first["names"])
    assert set(first["measured"]) == {f"time_share.{kind}" for kind in KINDS}
    assert sum(first["measured"].values()) == pytest.approx(1.0, abs=1e-6)
    untimed = api.inspect("zoo:tinylm", device="cpu", size="tiny", timed=False).signature
    assert untimed["values"] == first["values"] and untimed["measured"] == {}


def _tiny(name, size="tiny"):
    w = build_workload(name, BuildOptions(size=size))
    return w.model, w.example_inputs, name


@pytest.mark.slow
def test_signatures_separate_encoders_decoders_and_cnns():
    family = {"bert": "encoder", "minilm": "encoder", "tinylm": "decoder", "llama-tiny": "decoder", "resnet": "cnn", "resnet-tiny": "cnn"}
    sigs = {
        "bert": signature(capture(*_tiny("bert-base", "full"))),
        "minilm": signature(capture(*_tiny("minilm", "full"))),
        "tinylm": signature(capture(*_tiny("tinylm", "full"))),
        "llama-tiny": signature(capture(*_tiny("llama-1b"))),
        "resnet": signature(capture(*_tiny("resnet50", "full"))),
        "resnet-tiny": signature(capture(*_tiny("resnet50"))),
    }
    for name, sig in sigs.items():
        nearest = min((other for other in sigs if other != name), key=lambda other: sig.distance(sigs[other]))
        assert family[nearest] == family[name], f"{name}'s nearest neighbour is {nearest}"


def test_onnx_model_is_inspected_with_measured_node_times(tmp_path):
    from agnitra import api

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).eval()
    path = tmp_path / "mlp.onnx"
    torch.onnx.export(model, (torch.randn(16, 64),), str(path), dynamo=False, input_names=["x"])
    report = api.inspect(str(path), device="cpu", runs=5)
    ir = report.ir
    assert ir.source == "onnx" and ir.timing["step_us"] > 0
    gemms = [n for n in ir.nodes if n.kind == "matmul"]
    assert len(gemms) == 2 and all(n.time_us > 0 for n in gemms)
    assert sum(n.share for n in ir.nodes) == pytest.approx(1.0, rel=1e-6)
    assert report.hotspots[0].time_us > 0 and "graph optimisations off" in ir.notes[-1]


def test_a_torchscript_model_is_traced_without_module_hooks(tmp_path):
    """TorchScript modules take no Python forward hooks: inspecting a saved TorchScript file (a
    service upload) raised from register_forward_pre_hook; its ops are traced, unattributed."""
    from agnitra import api

    scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)))
    scripted.save(str(tmp_path / "m.pt"))
    report = api.inspect(str(tmp_path / "m.pt"), device="cpu", timed=False, input_shapes=["2x8"])
    assert report.ir.op_mix()["matmul"]["count"] == 2

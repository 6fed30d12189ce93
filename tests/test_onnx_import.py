"""ONNX import: kinds, FLOPs and bytes per node against their formulas, modules, shapes, errors."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from agnitra.errors import WorkloadError
from agnitra.ir.onnx_import import import_onnx, module_from_path, weight_matmul_count


def _export(model: nn.Module, inputs: tuple, path: Path, dynamic: dict | None = None, opset: int = 17) -> Path:
    names = [f"x{i}" if len(inputs) > 1 else "x" for i in range(len(inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), inputs, str(path), dynamo=False, opset_version=opset,
                          input_names=names, output_names=["y"], dynamic_axes=dynamic)
    return path


def _of_kind(ir, kind):
    return [n for n in ir.nodes if n.kind == kind]


def test_linear_is_one_weight_matmul(tmp_path):
    M, K, N = 5, 32, 24
    ir = import_onnx(_export(nn.Linear(K, N), (torch.randn(M, K),), tmp_path / "linear.onnx"))
    (mm,) = _of_kind(ir, "matmul")
    assert mm.flops == 2 * M * K * N
    assert mm.weight_input
    assert mm.bytes_read >= 4 * (M * K + K * N)  # the activations and the weight
    assert mm.bytes_written == 4 * M * N
    assert all(n.kind == "elementwise" for n in ir.nodes if n.op == "onnx::Add")  # a separate bias add
    assert ir.params == K * N + N and ir.param_bytes == 4 * (K * N + N)
    assert ir.source == "onnx" and ir.name == "linear"
    assert ir.inputs == [{"name": "x", "shape": [M, K], "dtype": "float32"}]


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        return torch.relu(self.proj(x))


class _WithBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blk = _Block()

    def forward(self, x):
        return self.blk(x) * 2


def test_module_names_recovered_from_node_names(tmp_path):
    B, S = 2, 3
    ir = import_onnx(_export(_WithBlock(), (torch.randn(B, S, 16),), tmp_path / "blk.onnx"))
    proj = [n for n in ir.nodes if n.module == "blk.proj"]
    assert {n.op for n in proj} == {"onnx::MatMul", "onnx::Add"}  # a 3-d input: MatMul, then the bias
    (mm,) = [n for n in proj if n.op == "onnx::MatMul"]
    (bias,) = [n for n in proj if n.op == "onnx::Add"]
    assert mm.kind == "matmul" and mm.flops == 2 * B * S * 16 * 8
    assert bias.kind == "elementwise" and bias.flops == B * S * 8
    assert bias.inputs[1] == mm.name or bias.inputs[0] == mm.name  # edges name the producer node
    assert [n.module for n in ir.nodes if n.op == "onnx::Relu"] == ["blk"]
    assert [n.module for n in ir.nodes if n.op == "onnx::Mul"] == [""]
    assert module_from_path("/bert/encoder/layer.0/attention/self/query/MatMul") == "bert.encoder.layer.0.attention.self.query"
    assert module_from_path("MatMul_3") is None


class _Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.seq(self.act(x)))  # `act` called twice: the exporter names it act, act_1


def test_module_names_of_nested_and_reused_modules(tmp_path):
    model = _Nested()
    ir = import_onnx(_export(model, (torch.randn(2, 4, 8),), tmp_path / "nested.onnx"))
    assert {n.module for n in ir.nodes} <= {name for name, _ in model.named_modules()}
    assert {n.module for n in ir.nodes if n.kind == "matmul"} == {"seq.0.0"}
    assert [n.module for n in ir.nodes if n.op == "onnx::Tanh"] == ["seq.0.1"]
    assert [n.module for n in ir.nodes if n.op == "onnx::Relu"] == ["act", "act"]


def test_conv_flops_use_output_size(tmp_path):
    n, cin, cout, h, k, groups = 2, 4, 8, 17, 3, 2
    conv = nn.Conv2d(cin, cout, k, stride=2, padding=1, groups=groups)
    ir = import_onnx(_export(conv, (torch.randn(n, cin, h, h),), tmp_path / "conv.onnx"))
    (node,) = _of_kind(ir, "conv")
    ho = (h + 2 - k) // 2 + 1  # 9: differs from the input's 17
    assert node.output_shapes == [[n, cout, ho, ho]]
    assert node.flops == 2 * n * cout * ho * ho * (cin // groups) * k * k
    assert node.weight_input and node.bytes_read >= 4 * (n * cin * h * h + cout * (cin // groups) * k * k)


class _Scores(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return self.q(x) @ self.k(x).transpose(-1, -2)


def test_activation_product_is_attention(tmp_path):
    B, S, D = 2, 10, 16
    ir = import_onnx(_export(_Scores(D), (torch.randn(B, S, D),), tmp_path / "scores.onnx"))
    (scores,) = _of_kind(ir, "attention")
    assert scores.op == "onnx::MatMul" and not scores.weight_input
    assert scores.flops == 2 * B * S * S * D
    assert scores.output_shapes == [[B, S, S]]
    assert len(_of_kind(ir, "matmul")) == 2


def test_layer_norm_is_a_norm_node(tmp_path):
    ir = import_onnx(_export(nn.LayerNorm(32), (torch.randn(4, 7, 32),), tmp_path / "ln.onnx", opset=17))
    (ln,) = _of_kind(ir, "norm")
    assert ln.op == "onnx::LayerNormalization"
    assert ln.flops == 8 * 4 * 7 * 32
    assert ln.module == ""


def test_embedding_gather_reads_only_rows(tmp_path):
    ids = torch.randint(0, 1000, (2, 5))
    ir = import_onnx(_export(nn.Embedding(1000, 16), (ids,), tmp_path / "emb.onnx"))
    (gather,) = _of_kind(ir, "embedding")
    rows = 2 * 5 * 16 * 4
    assert gather.bytes_written == rows
    assert gather.bytes_read == rows + 2 * 5 * 8  # the rows and the int64 ids, not the 1000-row table


def test_symbolic_batch_bound_from_input_shapes(tmp_path):
    K, N = 12, 20
    path = _export(nn.Linear(K, N), (torch.randn(3, K),), tmp_path / "dyn.onnx", dynamic={"x": {0: "batch"}, "y": {0: "batch"}})
    bound = import_onnx(path, input_shapes={"x": [6, K]})
    assert bound.inputs[0]["shape"] == [6, K]
    assert _of_kind(bound, "matmul")[0].flops == 2 * 6 * K * N
    assert not any("assumed" in note for note in bound.notes)
    default = import_onnx(path)
    assert default.inputs[0]["shape"] == [1, K]
    assert _of_kind(default, "matmul")[0].flops == 2 * 1 * K * N
    assert any("assumed" in note and "x[0]" in note for note in default.notes)
    with pytest.raises(WorkloadError, match="not inputs of the model"):
        import_onnx(path, input_shapes={"nope": [1, K]})
    with pytest.raises(WorkloadError, match="fixed at"):
        import_onnx(path, input_shapes={"x": [6, K + 1]})


def test_unknown_shapes_and_ops_never_crash():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Mystery", ["r"], ["m"], name="mystery", domain="example.custom"),
        helper.make_node("Relu", ["m"], ["y"], name="after"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
    ir = import_onnx(model, name="custom")
    by_name = ir.by_name()
    assert by_name["relu"].flops == 1 * 8 and by_name["relu"].kind == "elementwise"
    assert by_name["mystery"].op == "example.custom::Mystery" and by_name["mystery"].kind == "other"
    assert by_name["mystery"].flops == 0 and by_name["after"].bytes == 0  # shapes unknown downstream
    unknown = [note for note in ir.notes if "shapes unknown" in note]
    assert len(unknown) == 1 and "mystery" in unknown[0] and "after" in unknown[0]
    assert ir.name == "custom" and ir.inputs[0]["shape"] == [1, 8]


def test_dynamo_metadata_gives_module_and_type():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    node = helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    for key, value in {
        "pkg.torch.onnx.name_scopes": "['', 'blk', 'blk.act', 'relu']",
        "pkg.torch.onnx.class_hierarchy": "['m.M', 'm.Blk', 'torch.nn.modules.activation.ReLU', 'aten.relu.default']",
    }.items():
        node.metadata_props.add(key=key, value=value)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    (relu,) = import_onnx(model).nodes
    assert (relu.module, relu.module_type) == ("blk.act", "ReLU")


def test_corrupt_file_raises_workload_error(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not an onnx model \x00\x01\x02" * 10)
    with pytest.raises(WorkloadError, match=r"junk\.onnx.*re-export"):
        import_onnx(junk)
    good = _export(nn.Linear(64, 64), (torch.randn(2, 64),), tmp_path / "good.onnx")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(WorkloadError, match=r"cut\.onnx.*re-export"):
        import_onnx(cut)
    with pytest.raises(WorkloadError, match="missing.onnx"):
        import_onnx(tmp_path / "missing.onnx")


# ---------------------------------------------------------------------------------------------
# A tiny zoo BERT, exported as Agnitra exports it, unfused and fused by ONNX Runtime's optimizer


@pytest.fixture(scope="module")
def bert_files(tmp_path_factory):
    from agnitra.ort.export import export_onnx, optimize_transformer
    from agnitra.workloads.registry import BuildOptions, build_workload

    workload = build_workload("bert-base", BuildOptions(size="tiny"))
    folder = tmp_path_factory.mktemp("bert")
    plain, fused = folder / "bert.onnx", folder / "bert_fused.onnx"
    export_onnx(workload, plain)
    stats = optimize_transformer(plain, fused, workload.hints, use_gpu=False)
    assert stats.get("Attention"), stats
    layers = 2  # the tiny config
    return plain, fused, layers


def test_fused_bert_has_attention_nodes(bert_files):
    plain, fused, layers = bert_files
    ir = import_onnx(fused)
    attention = [n for n in ir.nodes if n.op == "com.microsoft::Attention"]
    assert len(attention) == layers and all(n.kind == "attention" and n.weight_input for n in attention)
    assert all(n.module.endswith("attention.self") for n in attention)
    skip = [n for n in ir.nodes if n.op == "com.microsoft::SkipLayerNormalization"]
    assert len(skip) == 2 * layers and all(n.kind == "norm" for n in skip)
    for n in skip:  # the norm (8), the residual add (1) and the bias add (1) per element
        assert n.flops == 10 * math.prod(n.output_shapes[0])
    assert [n.kind for n in ir.nodes if n.op == "com.microsoft::EmbedLayerNormalization"] == ["embedding"]
    assert not any("shapes unknown" in note for note in ir.notes)


def test_fusion_keeps_flops_and_weight_matmuls(bert_files):
    plain, fused, layers = bert_files
    shapes = {"input_ids": [1, 16], "attention_mask": [1, 16]}  # the export's example (its sequence is a dynamic axis)
    unfused_ir, fused_ir = import_onnx(plain, input_shapes=shapes), import_onnx(fused, input_shapes=shapes)
    assert not any("shapes unknown" in note for note in unfused_ir.notes)
    assert fused_ir.total_flops == pytest.approx(unfused_ir.total_flops, rel=0.02)
    # weight products: Q, K, V, attention output, FFN in and out per layer; the fused Attention
    # carries the packed QKV weight, so it counts for three of them
    assert len(_of_kind(unfused_ir, "matmul")) == 6 * layers
    assert len(_of_kind(fused_ir, "matmul")) == 3 * layers
    assert weight_matmul_count(unfused_ir) == weight_matmul_count(fused_ir) == 6 * layers
    # unfused: QK^T and PV per layer are the activation products
    assert len(_of_kind(unfused_ir, "attention")) == 2 * layers
    # views move nothing, a transpose copies
    assert all(n.bytes == 0 for n in unfused_ir.nodes if n.op in ("onnx::Reshape", "onnx::Unsqueeze", "onnx::Constant"))
    assert all(n.bytes > 0 for n in unfused_ir.nodes if n.op == "onnx::Transpose")
    # the fused Attention's FLOPs are exactly those of the Q/K/V MatMuls and the two products
    for layer in range(layers):
        prefix = f"bert.encoder.layer.{layer}.attention.self"
        unfused = sum(n.flops for n in unfused_ir.nodes if n.module.startswith(prefix) and n.kind in ("matmul", "attention"))
        (attention,) = [n for n in fused_ir.nodes if n.op == "com.microsoft::Attention" and n.module == prefix]
        assert attention.flops == unfused


def test_fused_bert_batch_is_bound(bert_files):
    _, fused, _ = bert_files
    one = import_onnx(fused)
    seq = one.inputs[0]["shape"][1]
    four = import_onnx(fused, input_shapes={"input_ids": [4, seq], "attention_mask": [4, seq]})
    assert [i["shape"] for i in four.inputs] == [[4, seq], [4, seq]]
    def products(ir):
        return sum(n.flops for n in ir.nodes if n.kind in ("matmul", "attention"))

    assert products(four) == 4 * products(one)
    assert four.total_flops == pytest.approx(4 * one.total_flops, rel=1e-4)  # shape arithmetic does not scale


def test_int8_bert_shapes_and_products(bert_files, tmp_path):
    from agnitra.ort.export import quantize_int8

    _, fused, layers = bert_files
    quantized = tmp_path / "bert_int8.onnx"
    quantize_int8(fused, quantized)
    ir, float_ir = import_onnx(quantized), import_onnx(fused)
    assert not any("shapes unknown" in note for note in ir.notes)  # QAttention, QEmbedLayerNormalization
    integer = [n for n in ir.nodes if n.op == "onnx::MatMulInteger"]
    assert len(integer) == 3 * layers and all(n.kind == "matmul" for n in integer)
    assert sorted(n.flops for n in integer) == sorted(n.flops for n in _of_kind(float_ir, "matmul"))
    q_attention = [n for n in ir.nodes if n.op == "com.microsoft::QAttention"]
    assert [n.kind for n in q_attention] == ["attention"] * layers
    assert sum(n.flops for n in q_attention) == sum(n.flops for n in _of_kind(float_ir, "attention"))
    assert weight_matmul_count(ir) == 6 * layers
    assert [n.kind for n in ir.nodes if n.op == "com.microsoft::QEmbedLayerNormalization"] == ["embedding"]
    skip = [n for n in ir.nodes if n.op == "com.microsoft::SkipLayerNormalization"]
    assert len(skip) == 2 * layers and all(n.module.startswith("bert.encoder.layer.") for n in skip)
    # int8 weights: the products read a quarter of the float weight bytes
    assert sum(n.bytes_read for n in integer) < 0.5 * sum(n.bytes_read for n in _of_kind(float_ir, "matmul"))

"""User models load from a factory, a torch.export archive, TorchScript and ONNX."""

from __future__ import annotations

import textwrap

import torch

from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.loaders import load_workload, smoke_test
from agnitra.workloads.registry import BuildOptions


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_factory_returning_a_tuple(tmp_path):
    (tmp_path / "m.py").write_text(
        textwrap.dedent(
            """
            import torch
            def make():
                torch.manual_seed(0)
                return torch.nn.Sequential(torch.nn.Linear(8, 4)), (torch.randn(5, 8),)
            """
        )
    )
    workload = load_workload(f"{tmp_path}/m.py:make", BuildOptions())
    assert workload.task == TaskKind.GENERIC and workload.comparison == "rel_error"
    assert workload.batch == 5 and workload.source.endswith("m.py:make")
    assert smoke_test(workload)[0].shape == (5, 4)


def test_factory_returning_a_workload(tmp_path):
    (tmp_path / "w.py").write_text(
        textwrap.dedent(
            """
            import torch
            from agnitra import Workload
            def make():
                return Workload(name="mine", model=torch.nn.Linear(3, 10), example_inputs=(torch.randn(2, 3),), task="classifier")
            """
        )
    )
    workload = load_workload(f"{tmp_path}/w.py:make", BuildOptions(), task=None)
    assert isinstance(workload, Workload) and workload.name == "mine" and workload.comparison == "top1"


def test_task_override_changes_the_comparison(tmp_path):
    (tmp_path / "m.py").write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 6), (torch.randn(2, 4),)\n")
    workload = load_workload(f"{tmp_path}/m.py:make", BuildOptions(), task="embedding")
    assert workload.comparison == "cosine"


def test_torch_export_archive(tmp_path):
    model, x = Small().eval(), torch.randn(3, 8)
    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    workload = load_workload(str(path), BuildOptions())
    out = smoke_test(workload)[0]
    torch.testing.assert_close(out, model(x))


def test_onnx_model_runs_through_onnxruntime(tmp_path):
    model, x = Small().eval(), torch.randn(2, 8)
    path = tmp_path / "small.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    workload = load_workload(str(path), BuildOptions(batch=6))
    assert workload.example_inputs[0].shape == (6, 8)  # symbolic batch filled from --batch
    out = smoke_test(workload)[0]
    torch.testing.assert_close(out, model(workload.example_inputs[0]), rtol=1e-5, atol=1e-5)
    a, b = workload.inputs(1), workload.inputs(2)
    assert not torch.equal(a[0], b[0]) and torch.equal(a[0], workload.inputs(1)[0])

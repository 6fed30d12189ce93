"""Flags that do not apply to a model source are refused, not ignored; those that apply are used.

--batch/--seq-len/--tokens/--size reach a file.py factory through parameters of those names;
a .pt2 archive fixes its inputs; TorchScript takes its shapes from --input-shape; an ONNX graph's
symbolic dimensions are what --batch/--seq-len fill; zoo and factory models make their own inputs.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from agnitra.cli import main
from agnitra.errors import UserError
from agnitra.workloads.loaders import load_workload
from agnitra.workloads.prepare import prepare_workload
from agnitra.workloads.registry import BuildOptions

FACTORIES = textwrap.dedent(
    """
    import torch

    def fixed():
        return torch.nn.Linear(4, 2), (torch.randn(3, 4),)

    def sized(batch=2, seq_len=5):
        return torch.nn.Linear(4, 2), (torch.randn(batch, seq_len, 4),)

    def anything(**options):
        return torch.nn.Linear(4, 2), (torch.randn(options.get("batch", 1), 4),)
    """
)


@pytest.fixture
def factories(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(FACTORIES)
    return path


def _refused(spec: str, match: str, **kwargs) -> str:
    options = BuildOptions(**{k: kwargs.pop(k) for k in ("batch", "seq_len", "tokens", "size") if k in kwargs})
    with pytest.raises(UserError) as info:
        load_workload(spec, options, **kwargs)
    message = str(info.value)
    assert match in message and len(message.splitlines()) == 1, message
    return message


def test_batch_for_a_factory_without_the_parameter_is_refused(factories):
    _refused(f"{factories}:fixed", f"{factories}:fixed takes no 'batch' parameter; add one to it or drop --batch", batch=8)


def test_batch_and_seq_len_reach_a_factory_that_takes_them(factories):
    workload = load_workload(f"{factories}:sized", BuildOptions(batch=7, seq_len=3))
    assert workload.example_inputs[0].shape == (7, 3, 4) and workload.batch == 7


def test_a_factory_taking_keyword_arguments_gets_the_given_flags(factories):
    workload = load_workload(f"{factories}:anything", BuildOptions(batch=6))
    assert workload.example_inputs[0].shape == (6, 4)


def test_size_for_a_factory_without_the_parameter_is_refused(factories):
    _refused(f"{factories}:sized", "takes no 'size' parameter; add one to it or drop --size", size="tiny")


def test_tokens_for_a_factory_without_the_parameter_is_refused(factories):
    _refused(f"{factories}:sized", "takes no 'tokens' parameter", tokens=4)


def test_input_shape_for_a_factory_is_refused(factories):
    _refused(f"{factories}:fixed", "--input-shape does not apply to", input_shapes=["3x4"])


def test_batch_for_a_factory_through_the_cli_exits_2(factories, capsys):
    code = main(["profile", f"{factories}:fixed", "--device", "cpu", "--batch", "8"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "takes no 'batch' parameter" in err and "Traceback" not in err


def test_input_shape_for_a_zoo_workload_is_refused():
    _refused("zoo:tinylm", "--input-shape does not apply to zoo:tinylm", input_shapes=["1x8"], size="tiny")


def test_seq_len_for_an_image_classifier_is_refused():
    _refused("zoo:resnet50", "--seq-len does not apply to zoo:resnet50", seq_len=64)


def test_tokens_for_a_zoo_model_that_is_no_decoder_is_refused():
    _refused("zoo:resnet50", "--tokens does not apply to zoo:resnet50", tokens=8, size="tiny")


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "linear.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), str(path))
    return path


@pytest.mark.parametrize("flag, option", [("--batch", {"batch": 8}), ("--seq-len", {"seq_len": 8}), ("--input-shape", {"input_shapes": ["3x4"]})])
def test_size_flags_for_a_pt2_archive_are_refused(archive, flag, option):
    _refused(str(archive), f"{flag} does not apply to {archive}: a .pt2 archive fixes its example inputs", **option)


def test_batch_for_torchscript_is_refused(tmp_path):
    path = tmp_path / "linear.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(4, 2)), str(path))
    _refused(str(path), "--batch does not apply to", batch=8, input_shapes=["3x4"])


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx")
    fixed, dynamic = folder / "fixed.onnx", folder / "dynamic.onnx"
    model, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
    torch.onnx.export(model, (x,), str(fixed), dynamo=False, input_names=["x"])
    torch.onnx.export(model, (x,), str(dynamic), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    return fixed, dynamic


def test_batch_for_an_onnx_graph_with_fixed_shapes_is_refused(onnx_files):
    fixed, _ = onnx_files
    _refused(str(fixed), "its graph fixes those dimensions", batch=8)


def test_seq_len_for_an_onnx_graph_with_only_a_symbolic_batch_is_refused(onnx_files):
    _, dynamic = onnx_files
    assert load_workload(str(dynamic), BuildOptions(batch=5)).example_inputs[0].shape == (5, 4)
    _refused(str(dynamic), "--seq-len does not apply", seq_len=16)


def test_batch_with_input_shape_for_onnx_is_refused(onnx_files):
    _, dynamic = onnx_files
    _refused(str(dynamic), "--input-shape gives its input shapes", batch=8, input_shapes=["3x4"])


def test_tokens_for_onnx_is_refused(onnx_files):
    _refused(str(onnx_files[0]), "--tokens does not apply", tokens=8)


def test_dtype_for_onnx_is_refused(onnx_files):
    with pytest.raises(UserError, match="--dtype does not apply to an ONNX model"):
        prepare_workload(str(onnx_files[0]), device="cpu", dtype="bf16")


def test_batch_for_a_model_passed_in_python_is_refused():
    with pytest.raises(UserError, match="batch= does not apply to a model passed with example_inputs"):
        prepare_workload(torch.nn.Linear(4, 2), (torch.randn(3, 4),), device="cpu", batch=8)

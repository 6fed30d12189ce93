"""Errors a user can cause: one line, exit code 2, no traceback; and device selection."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from agnitra.cli import main
from agnitra.device import resolve_device
from agnitra.errors import DeviceUnavailable, UserError, WorkloadError
from agnitra.workloads.loaders import load_workload, parse_input_shape, smoke_test
from agnitra.workloads.registry import BuildOptions


def _run_cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cuda_absent_is_a_one_line_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(DeviceUnavailable, match="--device cpu"):
        resolve_device("cuda")
    code, out, err = _run_cli(["bench", "zoo:tinylm", "--device", "cuda"], capsys)
    assert code == 2
    assert err.strip().startswith("error: CUDA was requested") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_device_from_environment(monkeypatch):
    monkeypatch.setenv("AGNITRA_DEVICE", "cpu")
    assert resolve_device(None).type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda")
    with pytest.raises(UserError, match="unknown device"):
        resolve_device("tpu")


def test_missing_file(capsys, tmp_path):
    code, _, err = _run_cli(["profile", str(tmp_path / "nope.onnx"), "--device", "cpu"], capsys)
    assert code == 2 and "model file not found" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "spec, message",
    [
        ("model.py", "no factory"),
        ("{dir}/m.py:missing", "has no function 'missing'"),
        ("{dir}/m.py:not-a-name", "bad factory name"),
        ("{dir}/m.py:returns_junk", "must return (model, example_inputs)"),
        ("{dir}/m.py:raises", "raised ValueError"),
        ("zoo:nope", "no zoo workload named 'nope'"),
        ("{dir}/weights.bin", "cannot tell what"),
    ],
)
def test_bad_model_specs(tmp_path, spec, message):
    (tmp_path / "m.py").write_text(
        textwrap.dedent(
            """
            import torch
            def make():
                return torch.nn.Linear(4, 2), (torch.randn(3, 4),)
            def returns_junk():
                return 42
            def raises():
                raise ValueError("boom")
            """
        )
    )
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8)
    with pytest.raises(UserError) as info:
        load_workload(spec.format(dir=tmp_path), BuildOptions())
    assert message in str(info.value)


def test_shape_mismatch_is_a_user_error(tmp_path):
    (tmp_path / "m.py").write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 2), (torch.randn(3, 5),)\n")
    workload = load_workload(f"{tmp_path}/m.py:make", BuildOptions())
    with pytest.raises(WorkloadError, match=r"failed on its example inputs \(3, 5\).*check the input shapes"):
        smoke_test(workload)


def test_shape_mismatch_through_cli(tmp_path, capsys):
    (tmp_path / "m.py").write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 2), (torch.randn(3, 5),)\n")
    code, _, err = _run_cli(["bench", f"{tmp_path}/m.py:make", "--device", "cpu"], capsys)
    assert code == 2 and "failed on its example inputs" in err


def test_input_shape_parsing():
    spec = parse_input_shape("1x128:int64")
    assert spec.shape == (1, 128) and spec.dtype == torch.int64
    assert parse_input_shape("2x3").dtype == torch.float32
    with pytest.raises(UserError, match="bad --input-shape"):
        parse_input_shape("1,128")
    with pytest.raises(UserError, match="unknown dtype"):
        parse_input_shape("1x2:int3")


def test_corrupt_onnx_file(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"this is not protobuf")
    with pytest.raises(WorkloadError, match="not a valid ONNX model"):
        load_workload(str(bad), BuildOptions())


def test_torchscript_needs_shapes(tmp_path):
    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(4, 2)), str(path))
    with pytest.raises(WorkloadError, match="--input-shape"):
        load_workload(str(path), BuildOptions())
    workload = load_workload(str(path), BuildOptions(), input_shapes=["3x4"])
    assert smoke_test(workload)[0].shape == (3, 2)


def test_a_state_dict_is_not_a_model(tmp_path):
    path = tmp_path / "state.pt"
    torch.save({"w": torch.ones(2)}, str(path), _use_new_zipfile_serialization=False)
    with pytest.raises(WorkloadError, match=r"holds dict \(weights, not a model\); build the model in file.py:factory"):
        load_workload(str(path), BuildOptions(), input_shapes=["2"])


def test_unknown_variant_fails_before_building(capsys):
    code, _, err = _run_cli(["bench", "zoo:tinylm", "--device", "cpu", "--variants", "eager,turbo"], capsys)
    assert code == 2 and "unknown variant 'turbo'" in err


def test_debug_shows_the_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "agnitra.cli", "--debug", "bench", "zoo:nope", "--device", "cpu"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_unknown_transform_name(capsys):
    code, _, err = _run_cli(["optimize", "zoo:tinylm", "--size", "tiny", "--device", "cpu", "--transforms", "warp-drive"], capsys)
    assert code == 2 and "unknown transform 'warp-drive'" in err and "--list-transforms" in err


def test_list_transforms(capsys):
    code, out, _ = _run_cli(["optimize", "--list-transforms"], capsys)
    assert code == 0
    for name in ("precision", "compile", "int8-weight-only", "onnxruntime", "triton-kernels", "cuda-graphs"):
        assert name in out

"""Bad model files: untrusted ones run no code, damaged ones give one line.

The malicious files are made here: a real archive of a small model with one part replaced by a
payload that, if anything ran it, would create `pwned` (an `open(path, "w")` pickled through
`__reduce__`, or the same call written into the JSON fields torch evaluates). Each test asserts
the file was not created, the error is one line naming the problem and the fix (`--allow-pickle`
where trusting the file would help), and, where the file is legitimate but pickled, that it loads
with allow_pickle=True.
"""

from __future__ import annotations

import io
import json
import pickle
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from agnitra.cli import main
from agnitra.errors import UserError
from agnitra.workloads.loaders import load_workload, smoke_test
from agnitra.workloads.registry import BuildOptions


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.a(x).relu()


class CreatesFile:
    """Unpickling this calls open(path, "w"): the file exists afterwards if any code ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _opens(path: Path) -> str:
    """The same payload as Python source, for the JSON fields torch evaluates."""
    return f"open({str(path)!r}, 'w')"


@pytest.fixture(scope="module")
def legit_pt2(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pt2") / "small.pt2"
    torch.export.save(torch.export.export(Small().eval(), (torch.randn(2, 4),)), str(path))
    return path


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """Copy a zip archive entry by entry, each entry's bytes passed through edit(inner_path, data)."""
    with zipfile.ZipFile(src) as archive, zipfile.ZipFile(dst, "w") as out:
        for info in archive.infolist():
            inner = info.filename.split("/", 1)[1]
            out.writestr(info.filename, edit(inner, archive.read(info.filename)))
    return dst


def _edit_program(change):
    def edit(inner: str, data: bytes) -> bytes:
        if inner.startswith("models/") and inner.endswith(".json"):
            doc = json.loads(data)
            change(doc)
            return json.dumps(doc).encode()
        return data

    return edit


def _with_pickled_weight(src: Path, dst: Path, payload: bytes) -> Path:
    """The bias marked use_pickle (torch unpickles it with weights_only=False), its bytes `payload`."""
    with zipfile.ZipFile(src) as archive:
        config_name = next(n for n in archive.namelist() if n.endswith("_weights_config.json"))
        config = json.loads(archive.read(config_name))
    config["config"]["a.bias"]["use_pickle"] = True
    weight = "data/weights/" + config["config"]["a.bias"]["path_name"]

    def edit(inner: str, data: bytes) -> bytes:
        if inner.endswith("_weights_config.json"):
            return json.dumps(config).encode()
        return payload if inner == weight else data

    return _rewrite(src, dst, edit)


def _one_line_user_error(spec: str, tmp_path: Path, match: str, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        load_workload(spec, BuildOptions(), **kwargs)
    message = str(info.value)
    assert len(message.splitlines()) == 1 and "Traceback" not in message
    assert match in message, message
    return message


def _cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    err = capsys.readouterr().err.strip()
    return code, err


# --- torch.export archives -------------------------------------------------------------------


def test_pt2_weight_pickled_with_reduce_is_refused_and_runs_nothing(legit_pt2, tmp_path):
    pwned = tmp_path / "pwned"
    evil = _with_pickled_weight(legit_pt2, tmp_path / "evil.pt2", pickle.dumps(CreatesFile(pwned)))
    message = _one_line_user_error(str(evil), tmp_path, "--allow-pickle")
    assert "pickled entry (a.bias)" in message
    assert not pwned.exists()


def test_pt2_with_a_legitimately_pickled_weight_loads_only_when_trusted(legit_pt2, tmp_path):
    buffer = io.BytesIO()
    torch.save(torch.nn.Parameter(torch.full((3,), 0.5)), buffer)
    pickled = _with_pickled_weight(legit_pt2, tmp_path / "pickled.pt2", buffer.getvalue())
    _one_line_user_error(str(pickled), tmp_path, "--allow-pickle")
    workload = load_workload(str(pickled), BuildOptions(), allow_pickle=True)
    assert smoke_test(workload)[0].shape == (2, 3)
    assert torch.equal(dict(workload.model.named_parameters())["a.bias"].detach(), torch.full((3,), 0.5))


def test_pt2_sample_inputs_pickled_with_reduce_run_nothing(legit_pt2, tmp_path):
    pwned = tmp_path / "pwned"

    def edit(inner: str, data: bytes) -> bytes:
        return pickle.dumps(CreatesFile(pwned)) if inner.startswith("data/sample_inputs/") else data

    evil = _rewrite(legit_pt2, tmp_path / "inputs.pt2", edit)
    _one_line_user_error(str(evil), tmp_path, "--allow-pickle")
    assert not pwned.exists()


def test_pt2_shape_expression_evaluated_by_sympy_runs_nothing(legit_pt2, tmp_path):
    pwned = tmp_path / "pwned"

    def change(doc):
        doc["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] = {"as_expr": {"expr_str": _opens(pwned), "hint": 2}}

    evil = _rewrite(legit_pt2, tmp_path / "sym.pt2", _edit_program(change))
    message = _one_line_user_error(str(evil), tmp_path, "--allow-pickle")
    assert "shape expression" in message and not pwned.exists()


def test_pt2_guard_code_executed_by_torch_runs_nothing(legit_pt2, tmp_path):
    pwned = tmp_path / "pwned"

    def change(doc):
        doc["guards_code"] = [f"{_opens(pwned)} is not None"]

    evil = _rewrite(legit_pt2, tmp_path / "guard.pt2", _edit_program(change))
    message = _one_line_user_error(str(evil), tmp_path, "--allow-pickle")
    assert "input guards" in message
    assert not pwned.exists()


def test_pt2_payload_under_a_second_root_folder_is_still_found(legit_pt2, tmp_path):
    """torch reads the first entry's folder; a benign copy under another folder hides nothing."""
    pwned = tmp_path / "pwned"

    def change(doc):
        doc["guards_code"] = [f"{_opens(pwned)} is not None"]

    evil = _rewrite(legit_pt2, tmp_path / "two-roots.pt2", _edit_program(change))
    with zipfile.ZipFile(legit_pt2) as benign, zipfile.ZipFile(evil, "a") as archive:
        for info in benign.infolist():
            archive.writestr("zzz/" + info.filename.split("/", 1)[1], benign.read(info.filename))
    _one_line_user_error(str(evil), tmp_path, "input guards")
    assert not pwned.exists()


@pytest.mark.parametrize("how, message", [("duplicate", "two entries named"), ("prefixed", "bytes come before its first entry")])
def test_pt2_zip_tricks_are_refused_as_damaged(legit_pt2, tmp_path, how, message):
    """Archives Python's zipfile and torch's reader could read differently are not read at all."""
    path = tmp_path / f"{how}.pt2"
    if how == "prefixed":
        path.write_bytes(b"#!/bin/sh\n" + legit_pt2.read_bytes())
    else:
        _rewrite(legit_pt2, path, lambda inner, data: data)
        with warnings.catch_warnings(), zipfile.ZipFile(path, "a") as archive:
            warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
            archive.writestr(archive.namelist()[0], b"")
    _one_line_user_error(str(path), tmp_path, message)


def test_pt2_node_calling_a_python_function_is_refused(legit_pt2, tmp_path):
    def change(doc):
        node = {"target": "torch.os.system", "inputs": [], "outputs": [], "metadata": {}, "name": "rc", "is_hop_single_tensor_return": None}
        doc["graph_module"]["graph"]["nodes"].insert(0, node)

    evil = _rewrite(legit_pt2, tmp_path / "node.pt2", _edit_program(change))
    _one_line_user_error(str(evil), tmp_path, "'torch.os.system', which is not a torch operator")


def test_pt2_tree_spec_importing_a_module_is_refused(legit_pt2, tmp_path):
    def change(doc):
        spec = [1, {"type": "collections.defaultdict", "context": json.dumps({"default_factory_module": "antigravity", "default_factory_name": "geohash", "dict_context": []}), "children_spec": []}]
        doc["graph_module"]["module_call_graph"][0]["signature"]["out_spec"] = json.dumps(spec)

    evil = _rewrite(legit_pt2, tmp_path / "spec.pt2", _edit_program(change))
    _one_line_user_error(str(evil), tmp_path, "names Python objects")


def test_pt2_with_compiled_code_is_refused(legit_pt2, tmp_path):
    dst = tmp_path / "aoti.pt2"
    _rewrite(legit_pt2, dst, lambda inner, data: data)
    with zipfile.ZipFile(dst, "a") as archive:
        archive.writestr("small/data/aotinductor/model/model.so", b"\x7fELF")
    _one_line_user_error(str(dst), tmp_path, "compiled code")


def test_malicious_pt2_through_the_cli_exits_2_and_creates_nothing(legit_pt2, tmp_path, capsys):
    pwned = tmp_path / "pwned"
    evil = _with_pickled_weight(legit_pt2, tmp_path / "evil.pt2", pickle.dumps(CreatesFile(pwned)))
    code, err = _cli(["profile", str(evil), "--device", "cpu"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--allow-pickle" in err and not pwned.exists()


def test_legit_pt2_still_loads_without_trust(legit_pt2):
    workload = load_workload(str(legit_pt2), BuildOptions())
    assert smoke_test(workload)[0].shape == (2, 3)


def test_pt2_with_dynamic_shapes_and_guards_loads(tmp_path):
    class Halves(torch.nn.Module):
        def forward(self, x):
            return x[: x.shape[0] // 2] * 2

    batch = torch.export.Dim("b", min=2, max=64)
    program = torch.export.export(Halves(), (torch.randn(8, 4),), dynamic_shapes={"x": {0: 2 * batch}})
    path = tmp_path / "dynamic.pt2"
    torch.export.save(program, str(path))
    assert smoke_test(load_workload(str(path), BuildOptions()))[0].shape == (4, 4)


# --- TorchScript and torch.save checkpoints --------------------------------------------------


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "linear.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(4, 2)), str(path))
    return path


def test_torchscript_with_a_reduce_in_data_pkl_runs_nothing(tmp_path):
    pwned = tmp_path / "pwned"
    evil = _rewrite(_script(tmp_path), tmp_path / "evil.pt", lambda inner, data: pickle.dumps(CreatesFile(pwned), protocol=2) if inner == "data.pkl" else data)
    _one_line_user_error(str(evil), tmp_path, "not a readable TorchScript archive", input_shapes=["2x4"])
    assert not pwned.exists()


def test_torchscript_code_that_writes_files_is_refused(tmp_path):
    pwned = tmp_path / "pwned"

    class Saves(torch.nn.Module):
        def __init__(self, target: str) -> None:
            super().__init__()
            self.target = target

        def forward(self, x):
            torch.save(x, self.target)
            return x

    path = tmp_path / "saves.pt"
    torch.jit.save(torch.jit.script(Saves(str(pwned))), str(path))
    message = _one_line_user_error(str(path), tmp_path, "--allow-pickle", input_shapes=["2x4"])
    assert "calls save()" in message and not pwned.exists()


def test_checkpoint_zip_with_a_reduce_in_data_pkl_runs_nothing(tmp_path):
    pwned = tmp_path / "pwned"
    saved = tmp_path / "weights.pt"
    torch.save({"w": torch.ones(2)}, str(saved))
    evil = _rewrite(saved, tmp_path / "evil.pth", lambda inner, data: pickle.dumps(CreatesFile(pwned), protocol=2) if inner == "data.pkl" else data)
    _one_line_user_error(str(evil), tmp_path, "--allow-pickle", input_shapes=["2x4"])
    assert not pwned.exists()


def test_plain_pickle_with_a_reduce_runs_nothing(tmp_path):
    pwned = tmp_path / "pwned"
    path = tmp_path / "model.pkl.pt"
    path.write_bytes(pickle.dumps(CreatesFile(pwned)))
    _one_line_user_error(str(path), tmp_path, "--allow-pickle", input_shapes=["2x4"])
    assert not pwned.exists()


def test_model_saved_whole_loads_only_when_trusted(tmp_path):
    path = tmp_path / "whole.pt"
    torch.save(torch.nn.Linear(4, 2), str(path))
    _one_line_user_error(str(path), tmp_path, "--allow-pickle", input_shapes=["3x4"])
    workload = load_workload(str(path), BuildOptions(), input_shapes=["3x4"], allow_pickle=True)
    assert smoke_test(workload)[0].shape == (3, 2)


# --- damaged and odd files -------------------------------------------------------------------


def _damaged(source: Path, how: str, dst: Path) -> Path:
    data = source.read_bytes()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":
        middle = len(data) // 3
        data = data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 64]) + data[middle + 64 :]
    elif how == "empty":
        data = b""
    else:
        data = b"this is not a model\n" * 20
    dst.write_bytes(data)
    return dst


@pytest.fixture(scope="module")
def model_files(tmp_path_factory, legit_pt2) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("files")
    script = folder / "model.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(4, 2)), str(script))
    onnx = folder / "model.onnx"
    torch.onnx.export(torch.nn.Linear(4, 2), (torch.randn(2, 4),), str(onnx), dynamo=False)
    return {".pt2": legit_pt2, ".pt": script, ".onnx": onnx}


@pytest.mark.parametrize("suffix", [".pt2", ".pt", ".onnx"])
@pytest.mark.parametrize("how", ["truncated", "flipped", "empty", "junk"])
def test_damaged_files_give_one_line_through_the_cli(model_files, suffix, how, tmp_path, capsys):
    bad = _damaged(model_files[suffix], how, tmp_path / f"{how}{suffix}")
    shapes = ["--input-shape", "2x4"] if suffix == ".pt" else []
    code, err = _cli(["profile", str(bad), "--device", "cpu", *shapes], capsys)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and str(bad) in err, err
    assert any(fix in err for fix in ("re-save", "save it", "re-export", "save or copy", "torch.jit.save")), err


def test_a_directory_is_not_a_model(tmp_path, capsys):
    folder = tmp_path / "model.pt2"
    folder.mkdir()
    code, err = _cli(["profile", str(folder), "--device", "cpu"], capsys)
    assert code == 2 and "is a directory, not a model file" in err and len(err.splitlines()) == 1


def test_python_file_with_a_syntax_error(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("import torch\ndef make(:\n    pass\n")
    code, err = _cli(["profile", f"{tmp_path}/broken.py:make", "--device", "cpu"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "SyntaxError" in err and "run it with python" in err


def test_allow_pickle_does_not_apply_to_a_python_model():
    from agnitra.workloads.prepare import prepare_workload

    with pytest.raises(UserError, match="allow_pickle= does not apply"):
        prepare_workload(torch.nn.Linear(4, 2), (torch.randn(2, 4),), device="cpu", allow_pickle=True)

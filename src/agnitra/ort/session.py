"""An ONNX Runtime session behind a torch-facing `nn.Module`: tensors in, tensors out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from agnitra.errors import NotApplicable, WorkloadError

_ORT_TO_TORCH = {
    "tensor(float)": torch.float32,
    "tensor(float16)": torch.float16,
    "tensor(double)": torch.float64,
    "tensor(int64)": torch.int64,
    "tensor(int32)": torch.int32,
    "tensor(bool)": torch.bool,
    "tensor(uint8)": torch.uint8,
    "tensor(int8)": torch.int8,
}


def provider_for(device: torch.device) -> str:
    import onnxruntime as ort

    wanted = "CUDAExecutionProvider" if device.type == "cuda" else "CPUExecutionProvider"
    if wanted not in ort.get_available_providers():
        raise NotApplicable(
            f"onnxruntime {ort.__version__} has no {wanted} (available: {', '.join(ort.get_available_providers())}); "
            "install onnxruntime-gpu for CUDA"
        )
    return wanted


def open_session(path: Path, device: torch.device, threads: int | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if device.type == "cpu":
        options.intra_op_num_threads = threads or torch.get_num_threads()
        # idle worker threads would keep spinning after a call and take the cores from whatever
        # runs next (the other variants of an interleaved benchmark, or the user's own code)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=[provider_for(device)])
    except NotApplicable:
        raise
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        raise WorkloadError(f"ONNX Runtime cannot load {path}: {str(exc).splitlines()[0]} (re-export the model or check the opset)") from exc


class OrtModule(nn.Module):
    """Runs an ONNX Runtime session on torch tensors; outputs come back as torch tensors.

    On the CPU inputs go through NumPy without copies. On CUDA, inputs and outputs are bound to
    device memory (IO binding) so nothing crosses to the host.
    """

    def __init__(self, session, device: torch.device, path: Path | None = None) -> None:
        super().__init__()
        self.session = session
        self.device = device
        self.path = path  # the model file, for importing its graph into the IR
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]

    def forward(self, *inputs: torch.Tensor):
        if len(inputs) != len(self.input_names):
            raise WorkloadError(f"the ONNX model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), got {len(inputs)}")
        if self.device.type == "cuda":
            return self._run_cuda(inputs)
        feeds = {name: t.detach().cpu().numpy() for name, t in zip(self.input_names, inputs)}
        outputs = self.session.run(self.output_names, feeds)
        return tuple(torch.from_numpy(np.asarray(o)) for o in outputs)

    def _run_cuda(self, inputs):
        binding = self.session.io_binding()
        for name, t in zip(self.input_names, inputs):
            t = t.contiguous()
            binding.bind_input(name, "cuda", t.device.index or 0, _numpy_dtype(t.dtype), tuple(t.shape), t.data_ptr())
        for name in self.output_names:
            binding.bind_output(name, "cuda", self.device.index or 0)
        self.session.run_with_iobinding(binding)
        return tuple(_ortvalue_to_torch(v, self.device) for v in binding.get_outputs())


def _numpy_dtype(dtype: torch.dtype):
    return torch.empty(0, dtype=dtype).numpy().dtype


def _ortvalue_to_torch(value, device: torch.device) -> torch.Tensor:
    # dlpack keeps device memory on the device where this ORT build supports it
    if hasattr(value, "to_dlpack"):
        return torch.from_dlpack(value.to_dlpack())
    return torch.from_numpy(value.numpy()).to(device)


def input_specs(session) -> list[tuple[str, list, torch.dtype]]:
    """(name, shape with symbolic dims as strings or None, torch dtype) per graph input."""
    specs = []
    for i in session.get_inputs():
        if i.type not in _ORT_TO_TORCH:
            raise WorkloadError(f"ONNX input '{i.name}' has type {i.type}, which Agnitra cannot feed yet")
        specs.append((i.name, list(i.shape), _ORT_TO_TORCH[i.type]))
    return specs

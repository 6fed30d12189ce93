"""`onnxruntime` and `onnxruntime-int8`: the workload exported and run by ONNX Runtime.

The CPU provider on the CPU and the CUDA provider on a GPU (skipped with the reason where the
installed onnxruntime has none); graph optimisations at ORT_ENABLE_ALL and, for transformers the
workload describes, ORT's transformer optimizer fusions. `onnxruntime-int8` adds dynamic int8
quantisation (per-channel weights), the CPU peer that Agnitra must beat.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import torch

from agnitra.bench.variants.base import Prepared, Variant, register_variant
from agnitra.errors import check
from agnitra.ort.export import build_ort_model
from agnitra.ort.session import OrtModule, open_session, provider_for
from agnitra.workloads.base import Workload
from agnitra.workloads.behaviour import check_not_frozen


class OnnxRuntime(Variant):
    def __init__(self, name: str, int8: bool, description: str) -> None:
        self.name, self.int8, self.description = name, int8, description

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        check(workload.decoder is None, "decoders run in Agnitra's static-KV-cache decode loop, which is not exported to ONNX")
        check(not (self.int8 and device.type == "cuda"), "ONNX Runtime dynamic int8 quantisation targets the CPU provider")
        check(workload.dtype != torch.bfloat16, "ONNX Runtime has few bfloat16 kernels; run this variant with --dtype fp16 or fp32")
        if isinstance(workload.model, OrtModule):  # already an ONNX model: run it as it is
            return Prepared(call=workload.model, notes="the given ONNX model")
        check_not_frozen(workload, "an ONNX export")
        provider_for(device)  # NotApplicable early, before a costly export
        workdir = Path(tempfile.mkdtemp(prefix="agnitra-ort-"))
        try:
            return self._build(workload, device, workdir)
        except BaseException:
            shutil.rmtree(workdir, True)
            raise

    def _build(self, workload: Workload, device: torch.device, workdir: Path) -> Prepared:
        path, notes = build_ort_model(workload, workdir, device, optimize=True, int8=self.int8)
        module = OrtModule(open_session(path, device), device, path=path)
        weakref.finalize(module, shutil.rmtree, workdir, True)  # the files live as long as the session
        return Prepared(call=module, notes="; ".join(notes), arithmetic="int8" if self.int8 else "", lossy=self.int8)


register_variant(OnnxRuntime("onnxruntime", False, "ONNX Runtime, graph optimisations (+ transformer fusions)"))
register_variant(OnnxRuntime("onnxruntime-int8", True, "ONNX Runtime with dynamic int8 quantisation (CPU)"))

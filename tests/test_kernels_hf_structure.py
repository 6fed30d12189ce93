"""`triton-kernels` on a transformers Mistral in half precision, on the kernels' device: the
RMSNorms and gated MLPs it recognises by behaviour (`transforms.structure`) run as our Triton
kernels and compute what the model computes. On the CPU through Triton's interpreter at the
smallest size; with AGNITRA_GPU_TESTS=1 on the GPU, compiled, at a size where the kernels' tiles
are exercised."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import hf_families as families  # noqa: E402 - benchmarks/ is not a package
from kernel_device import DEVICE, ON_GPU  # noqa: E402

from agnitra.transforms import Recipe, TransformContext  # noqa: E402
from agnitra.transforms.patcher import apply_recipe  # noqa: E402

pytest.importorskip("transformers")

SIZE = "small" if ON_GPU else "tiny"
LAYERS = families.SIZES[SIZE][1]


@pytest.mark.interpreter
@pytest.mark.parametrize("weights", ["keep", "int8"])
def test_triton_kernels_on_a_half_precision_mistral_compute_what_it_computes(weights):
    from agnitra.kernels.modules import TritonFeedForward, TritonRMSNorm

    with torch.device("cpu"):  # built as the benchmark builds it (its seeded generators are CPU ones), then moved
        workload = families.build("mistral", SIZE)
    model = workload.model.to(device=DEVICE, dtype=torch.float16)
    workload.model = model
    workload.example_inputs = tuple(t.to(DEVICE) for t in workload.example_inputs)
    reference = [p.detach().clone() for p in model.parameters()]
    patched = apply_recipe(Recipe.of(("triton-kernels", {"weights": weights, "decode": False})), TransformContext(workload, DEVICE))
    modules = list(patched.model.modules())
    assert sum(isinstance(m, TritonRMSNorm) for m in modules) == 2 * LAYERS + 1
    assert sum(isinstance(m, TritonFeedForward) for m in modules) == LAYERS
    with torch.no_grad():
        ours, theirs = patched.model(*workload.example_inputs).float(), model(*workload.example_inputs).float()
    assert torch.isfinite(ours).all()
    error = ((ours - theirs).norm() / theirs.norm()).item()
    assert error < (2e-2 if weights == "keep" else 5e-2), error  # fp16 rounding; int8 rows ~1% on random weights
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference))  # the model itself untouched

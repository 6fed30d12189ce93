"""The noise floor of a random-weight decoder: how far the original drifts from itself.

On random weights a quantised recipe's logit SQNR says little by itself (int8 weight-only gives
14.6 dB on the random llama-8b, and Inductor's int8 the same), so the report puts beside it what
mere arithmetic does to the same model on the same positions: the original run in float32
against the original in its own lower precision. A candidate near that floor lost nothing a
change of precision would not; one far below it lost more.
"""

from __future__ import annotations

from typing import Any

import torch

from agnitra.models.generate import Generator
from agnitra.verify import logit_stats
from agnitra.workloads.base import Workload
from agnitra.workloads.model_copy import independent_copy

MEMORY_SHARE = 0.4  # the float32 copy may take at most this share of the device's free memory


def noise_floor(workload: Workload, reference_logits: torch.Tensor, windows: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> dict[str, Any]:
    """The original in float32 against the original as run (`reference_logits`, teacher-forced
    on `windows`): SQNR, KL, next-token agreement; or why it was not measured."""
    dtype = workload.dtype
    if dtype == torch.float32:
        return {"measured": False, "reason": "the model already runs in float32"}
    spec = workload.decoder
    fp32_bytes = 4 * sum(p.numel() for p in workload.model.parameters())
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if fp32_bytes > MEMORY_SHARE * free:
            return {"measured": False, "reason": f"a float32 copy ({fp32_bytes / 2**30:.1f} GiB) would take more than {MEMORY_SHARE:.0%} of the free GPU memory"}
    model = independent_copy(workload.model, clone_buffers=False).to(torch.float32)
    model.setup_caches(spec.batch, spec.max_seq_len)
    try:
        generator = Generator(model)
        logits = torch.cat([generator.teacher_forced_logits(prompt, reference) for prompt, reference in windows], dim=1).to("cpu")
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    stats = logit_stats(logits, reference_logits)
    return {"measured": True, "comparison": f"float32 against {str(dtype).replace('torch.', '')}, same positions", **stats}

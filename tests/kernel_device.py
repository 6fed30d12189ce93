"""Where the kernel tests run: the CPU through Triton's interpreter, or, on the GPU machine with
AGNITRA_GPU_TESTS=1, the same tests compiled for the GPU (conftest makes CUDA the default device)."""

from __future__ import annotations

import os

import torch

ON_GPU = os.environ.get("AGNITRA_GPU_TESTS") == "1" and torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")

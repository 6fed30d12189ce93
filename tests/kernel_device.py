"""Where the kernel tests run: the CPU through Triton's interpreter, or, on the GPU machine with
AGNITRA_GPU_TESTS=1, the same tests compiled for the GPU (conftest makes CUDA the default device)."""

from __future__ import annotations

import os

import torch

ON_GPU = os.environ.get("AGNITRA_GPU_TESTS") == "1" and torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")


def each_config(dtypes: dict[str, torch.dtype], configs: list[tuple]) -> list:
    """pytest params (*config, dtype), ids as stacked parametrize gives them ('1-2-1-True-fp16'):
    on the GPU every config with every dtype; under the interpreter (seconds a launch) each config
    once, the dtypes taken in turn, so every config and every dtype still runs there."""
    import pytest

    names = list(dtypes)
    params = []
    for i, config in enumerate(configs):
        for name in names if ON_GPU else [names[i % len(names)]]:
            params.append(pytest.param(*config, dtypes[name], id="-".join(str(v) for v in config) + "-" + name))
    return params

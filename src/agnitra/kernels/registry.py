"""Imports every kernel file, so each registers its KernelSpec (see `agnitra.kernels.spec`)."""

from __future__ import annotations

from agnitra.kernels import norms, gated_mlp  # noqa: F401
from agnitra.kernels import matmul  # noqa: F401
from agnitra.kernels.quant import int8, int4  # noqa: F401
from agnitra.kernels import decode_layer  # noqa: F401

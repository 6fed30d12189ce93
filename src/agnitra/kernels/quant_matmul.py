"""Former home of the weight-only quantised matmuls, now the package `agnitra.kernels.quant` (one
module per kernel family). Kept for the benchmark scripts that import it: any name of those
modules resolves here. Assigning to a name here changes nothing in them (patch the defining module)."""

from __future__ import annotations

from agnitra.kernels import _triton, pdl
from agnitra.kernels.quant import common, formats, int4, int4_bytes, int4_rows, int4_tc, int8, split_k, tiled

_MODULES = (int4, int8, int4_tc, int4_rows, int4_bytes, tiled, split_k, common, formats, pdl)
_ALIASES = {"_jit": _triton.jit_kernel, "_JITTED": _triton._JITTED, "_DEVICE_HELPERS": _triton._DEVICE_HELPERS}


def __getattr__(name: str):
    if name in _ALIASES:
        return _ALIASES[name]
    for module in _MODULES:
        if name in vars(module):
            return vars(module)[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Triton, or a stand-in when it is not installed: kernel files import `triton` and `tl` from here,
and `jit_kernel` / `device_helper` for kernels whose helpers are plain functions.

Without Triton the `@triton.jit` definitions still evaluate (to plain functions) so the kernel
specs register and `triton_available()` can say why nothing launches.

Kernels written as plain functions (the weight-only GEMVs, the decode layer) are jitted at their
first launch by `jit_kernel`, so TRITON_INTERPRET, read then, may be set after import. The
functions they call on the device are marked `@device_helper`: the interpreter runs them as
Python; for the compiler `jit_kernel` makes a copy of the kernel whose globals name the helpers
jitted. Triton resolves a kernel's globals in the kernel's own module, so a helper from another
module is imported there by name (which the interpreter needs too).
"""

from __future__ import annotations

import functools
import types
from typing import Any

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - only without the [gpu]/[dev] extras
    HAVE_TRITON = False
    tl = None

    class triton:  # type: ignore[no-redef]  # noqa: N801 - stands in for the module
        jit = staticmethod(lambda fn: fn)

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)


_DEVICE_HELPERS: set[str] = set()  # names of the plain functions kernels call (`device_helper`)
_JITTED: dict[tuple[str, bool], Any] = {}  # (kernel or helper name, interpreting) -> jitted; names are unique across kernel files


def device_helper(fn):
    """Marks `fn`, a plain function that kernels call on the device, to be jitted with them (`jit_kernel`)."""
    _DEVICE_HELPERS.add(fn.__name__)
    return fn


def jit_kernel(fn):
    """`triton.jit(fn)`, made once per interpreter setting (read at launch, not at import).

    The interpreter runs a kernel as Python, so its helpers stay plain functions there; the
    compiler needs them jitted, so a compiled kernel is made from a copy of `fn` whose globals
    name the jitted helpers (each found in `fn`'s module, and jitted the same way in its own).
    """
    import triton

    from agnitra.kernels.spec import interpreting

    key = (fn.__name__, interpreting())
    if key not in _JITTED:
        helpers = [name for name in _DEVICE_HELPERS if name in fn.__code__.co_names and name in fn.__globals__]
        if helpers and not interpreting():
            scope = {**fn.__globals__, **{name: jit_kernel(fn.__globals__[name]) for name in helpers}}
            clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
            fn = functools.update_wrapper(clone, fn, assigned=("__module__", "__qualname__", "__doc__", "__annotations__"), updated=())
        _JITTED[key] = triton.jit(fn)
    return _JITTED[key]

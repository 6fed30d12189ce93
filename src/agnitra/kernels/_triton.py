"""Triton, or a stand-in when it is not installed: kernel files import `triton` and `tl` from here.

Without Triton the `@triton.jit` definitions still evaluate (to plain functions) so the kernel
specs register and `triton_available()` can say why nothing launches.
"""

from __future__ import annotations

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

"""Weights requested into L2 ahead of their loads (Hopper's bulk prefetch).

A decode GEMV at batch 1 is a stream of weight bytes; each program reads its rows a step at a time,
with a step or two of loads in flight, so a kernel whose programs are few or slow to issue leaves
DRAM idle (latency, not bandwidth, bounds it). Weights are written by nobody during a model's run,
so a program may ask for all of its weight bytes at its very start, before the wait for the previous
kernel under PDL (`kernels.pdl`): `cp.async.bulk.prefetch.L2.global` (sm_90+) takes an address and a
size and returns at once; the data land in L2 and the program's own loads then find them there.

A kernel's programs that share an output block (split-K) share its rows: the block's weight bytes
are one contiguous range, cut into one piece a program, so each byte is asked for once and every
program issues one prefetch.

Device helper: `_l2_prefetch(ptr, ASM)`: one bulk prefetch from the program's first thread, of the
size baked into ASM (`l2_prefetch_asm(nbytes)`; "" does nothing: the interpreter, GPUs before
9.0). Host: `l2_prefetch_asm`.
"""

from __future__ import annotations

import torch

from agnitra.kernels._triton import tl

# issued by the program's first thread only (every thread runs the asm: the address is the program's)
_BULK_PREFETCH = """{{
.reg .pred first;
.reg .u32 tid;
mov.u32 tid, %tid.x;
setp.eq.u32 first, tid, 0;
@first cp.async.bulk.prefetch.L2.global [$1], {nbytes};
mov.u32 $0, 0;
}}"""


def _l2_prefetch(ptr, ASM: tl.constexpr):
    """Request the bytes at `ptr` (the program's one address, 16-byte aligned; the size in ASM, all
    inside the buffer) into L2, from the program's first thread; nothing waits for them. ASM "": nothing."""
    if ASM != "":
        tl.inline_asm_elementwise(ASM, "=r,l", [ptr + tl.zeros((1,), tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


def l2_prefetch_asm(x: torch.Tensor, nbytes: int) -> str:
    """The PTX of one bulk L2 prefetch of `nbytes` (a positive multiple of 16) for kernels launched on
    x's device, or "" where it cannot run (the interpreter, CPU, compute capability before 9.0)."""
    from agnitra.kernels.pdl import _capability
    from agnitra.kernels.spec import interpreting

    if nbytes <= 0 or nbytes % 16:
        raise ValueError(f"an L2 bulk prefetch takes a positive multiple of 16 bytes, got {nbytes}")
    if x.device.type != "cuda" or interpreting():
        return ""
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    return _BULK_PREFETCH.format(nbytes=nbytes) if _capability(index) >= (9, 0) else ""

"""Split-K in the kernel, and the ends every weight-only GEMV shares.

A GEMV whose output blocks alone would leave SMs idle splits K over SPLIT_K programs. Their fp32
partials are summed by one of them, in split order (deterministic), with no second launch:

* `_split_k_total` (config FIXUP "count", the default): each program stores its partial and
  counts its arrival on the block's counter; the last to arrive sums, adds the bias, stores and
  resets the counter.
* `_split_k_total_waiting` (FIXUP "wait", tensor-core GEMV only, a grid launched cooperatively so
  that all its programs are resident): split SPLIT_K - 1 waits until its siblings' slots no
  longer hold the empty mark, sums them with its own and marks them empty again: one memory round
  trip instead of the counter's atomics.

The counters and slots live in one persistent buffer per device (`reserve_split_k_counters`,
`reserve_split_k_slots`): zero / empty between launches, never reallocated under a CUDA graph
capture. `_gemv_bias`, `_store_gemv_rows` and `_store_gemv_vector` are the GEMVs' common end:
bias read before the main loop, fix-up, bias, cast, store.
"""

from __future__ import annotations

import torch

from agnitra.kernels._triton import device_helper, tl


# ============================================================================================
# Part 1: device helpers (called by the GEMV kernels)
# ============================================================================================


@device_helper
def _split_k_total(acc, p_ptrs, split_stride, mask, counter_ptr, pid_k, SPLIT_K: tl.constexpr):
    """In-kernel split-K fix-up, shared by the GEMV kernels (no second launch).

    Stores this program's fp32 partial at `p_ptrs + pid_k * split_stride` and counts its arrival
    on the block's counter. Returns (sum of the SPLIT_K partials in a fixed order: deterministic,
    True) to the block's last program, which also resets the counter, and (zeros, False) to the
    others. The caller adds its bias and stores when the flag is set. The reset is relaxed: the
    next launch is ordered after it by the launch itself, so nothing here waits for it (acq_rel
    put a fence and the exchange's round trip before the output's store: a fourth round trip after
    the loop).
    """
    tl.store(p_ptrs + pid_k * split_stride, acc, mask=mask)
    tl.debug_barrier()  # every thread's partial is written before the arrival is counted
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel")
    last = arrived == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        for split in tl.static_range(SPLIT_K):
            total += tl.load(p_ptrs + split * split_stride, mask=mask, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(counter_ptr, 0, sem="relaxed")  # ready for the next launch
    return total, last


SLOT_EMPTY = 0x7FF0DEAD  # `_split_k_total_waiting`'s empty mark: a NaN no arithmetic makes (the GPU's NaNs are 0x7FFFFFFF)
_SLOT_EMPTY = tl.constexpr(SLOT_EMPTY) if tl is not None else SLOT_EMPTY  # the kernels' globals must be constexpr


@device_helper
def _read_slots(p_ptrs, split_stride, mask, acc, SPLIT_K: tl.constexpr):
    """One round of the waiting fix-up's reads, all issued at once: the sum in split order of slots
    0 .. SPLIT_K - 2, and how many still hold the empty mark (a count whole in each warp, not always
    block-wide: the caller's CTA barrier comes before any slot is emptied)."""
    total = tl.zeros_like(acc)
    marks = tl.zeros(acc.shape, tl.int32)
    for split in tl.static_range(SPLIT_K - 1):
        part = tl.load(p_ptrs + split * split_stride, mask=mask, other=0.0, volatile=True)
        marks += (part.to(tl.int32, bitcast=True) == _SLOT_EMPTY).to(tl.int32)
        total += part
    return total, tl.sum(marks)


@device_helper
def _empty_slots(p_ptrs, split_stride, mask, acc, SPLIT_K: tl.constexpr):
    """Slots 0 .. SPLIT_K - 2 marked empty again, for the next launch (after the caller's CTA barrier)."""
    mark = tl.full(acc.shape, _SLOT_EMPTY, tl.int32).to(tl.float32, bitcast=True)
    for split in tl.static_range(SPLIT_K - 1):
        tl.store(p_ptrs + split * split_stride, mark, mask=mask)


@device_helper
def _split_k_total_waiting(acc, p_ptrs, split_stride, mask, pid_k, SPLIT_K: tl.constexpr):
    """Split-K fix-up in one memory round trip (config FIXUP "wait"), for a grid launched
    cooperatively: every program is resident at once, so a program may wait on its siblings.

    Programs 0 .. SPLIT_K - 2 of a block store their partials in the block's slots and are done (a
    partial with the empty mark's bits is stored as the canonical NaN); the block's program
    SPLIT_K - 1 reads those slots until none holds the mark (`_read_slots`), sums them in split
    order with its own (the counter fix-up's sum, bit for bit), and marks them empty again after a
    CTA barrier (`_empty_slots`; without the barrier a warp that left the wait first emptied slots
    another still read: it waited forever). No fence, atomic or counter. The slots hold the mark
    between launches (`reserve_split_k_slots`). Returns (total, True) to the waiting program and
    (zeros, False) to the others."""
    last = pid_k == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        empty = tl.full([], 1, tl.int32)
        while empty > 0:
            total, empty = _read_slots(p_ptrs, split_stride, mask, acc, SPLIT_K)
        total += acc
        tl.debug_barrier()  # every warp past the wait before a slot is emptied
        _empty_slots(p_ptrs, split_stride, mask, acc, SPLIT_K)
    else:
        bits = acc.to(tl.int32, bitcast=True)
        tl.store(p_ptrs + pid_k * split_stride, tl.where(bits == _SLOT_EMPTY, 0x7FC00000, bits).to(tl.float32, bitcast=True), mask=mask)
    return total, last


@device_helper
def _gemv_bias(b_ptr, offs, HAS_BIAS: tl.constexpr):
    """The bias of outputs `offs` (in range) in fp32 (0.0 without one), for a GEMV's end, read BEFORE its
    main loop: read at the end, the load waits for the reduction's barriers (no load moves above a
    barrier), a memory round trip more in every program, which the small decode GEMVs feel."""
    bias = 0.0
    if HAS_BIAS:
        bias = tl.load(b_ptr + offs).to(tl.float32)
    return bias


@device_helper
def _store_gemv_rows(acc, y_ptr, p_ptr, c_ptr, bias, pid_m, pid_n, pid_k, M, N, stride_ym, stride_yn,
                     HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """A [BLOCK_M, BLOCK_N] GEMV block's end: split-K fix-up (partials [SPLIT_K, M, N]), bias (`_gemv_bias`, [BN]), cast, store."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    last = True
    if SPLIT_K > 1:
        counter = c_ptr + pid_m * tl.num_programs(axis=0) + pid_n
        acc, last = _split_k_total(acc, p_ptr + rows[:, None] * N + cols[None, :], M * N, mask, counter, pid_k, SPLIT_K)
    if last:
        if HAS_BIAS:
            acc += bias[None, :]
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, acc.to(y_ptr.dtype.element_ty), mask=mask)


@device_helper
def _store_gemv_vector(out, cols, valid, y_ptr, p_ptr, c_ptr, bias, pid_n, pid_k, N, stride_yn,
                       HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr):
    """A batch-1 GEMV block's end: split-K fix-up (partials [SPLIT_K, N]), bias (`_gemv_bias`), cast, store of the `valid` columns."""
    last = True
    if SPLIT_K > 1:
        out, last = _split_k_total(out, p_ptr + cols, N, valid, c_ptr + pid_n, pid_k, SPLIT_K)
    if last:
        if HAS_BIAS:
            out += bias
        tl.store(y_ptr + cols * stride_yn, out.to(y_ptr.dtype.element_ty), mask=valid)


# ============================================================================================
# Part 2: host buffers (counters, slots, partials)
# ============================================================================================


_COUNTERS: dict[torch.device, list[torch.Tensor]] = {}  # every buffer ever handed out stays alive (CUDA graphs hold their addresses)


def _split_k_buffers(split_k: int, m: int, n: int, blocks: int, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 partials [SPLIT_K, M, N] and the arrival counters of an in-kernel split-K fix-up.

    The counters are zero before a launch and the last program of each block resets its own, so
    one buffer per device serves every launch in stream order. Two split-K GEMVs running at the
    same time on different streams would share counters: the GEMVs here run on one stream.
    """
    if split_k == 1:  # not read: the kernel's split-K branch is compiled out
        return y, y
    device = y.device
    return torch.empty((split_k, m, n), device=device, dtype=torch.float32), reserve_split_k_counters(device, blocks)


def _reserved(buffers: dict, device: torch.device, count: int, fill: int, what: str, reserve: str, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """The device's persistent buffer of `buffers` with at least `count` elements (65536 at least): int32
    words filled with `fill` when made, seen as `dtype`; a larger one is made when needed and the old
    ones stay alive (CUDA graphs hold their addresses). Made inside a CUDA graph capture it would be an
    allocation of the graph's pool that outlives the step, which torch refuses ("tensors in the
    cudagraph pool not tracked as outputs"): there a shortfall is an error naming `reserve`, the call
    that makes it first."""
    device = torch.device(device)
    held = buffers.setdefault(device, [])
    if not held or held[-1].numel() < count:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{count} {what} are needed on {device}, more than were reserved before this CUDA graph capture:"
                               f" call agnitra.kernels.quant.split_k.{reserve}(device, {count}) before capturing (kernel-backed Linears do when built)")
        held.append(torch.full((max(count, 1 << 16),), fill, dtype=torch.int32, device=device).view(dtype))
    return held[-1]


def reserve_split_k_counters(device: torch.device, blocks: int = 1) -> torch.Tensor:
    """The device's split-K arrival counters (at least `blocks`, zero), made on first use. Kernel-backed
    modules reserve them when they are built, never on a first call inside a CUDA graph capture (`_reserved`)."""
    return _reserved(_COUNTERS, device, blocks, 0, "split-K arrival counters", "reserve_split_k_counters")


_SLOTS: dict[torch.device, list[torch.Tensor]] = {}  # every buffer ever handed out stays alive (CUDA graphs hold their addresses)


def reserve_split_k_slots(device: torch.device, count: int = 1) -> torch.Tensor:
    """The device's split-K slots of the one-round-trip fix-up (config FIXUP "wait"): at least `count`
    fp32, marked empty, made on first use; every launch leaves them empty again. Kernel-backed modules
    whose tuned GEMVs wait reserve them when built, as the counters (`_reserved`)."""
    return _reserved(_SLOTS, device, count, SLOT_EMPTY, "split-K slots of the fix-up FIXUP='wait'", "reserve_split_k_slots", torch.float32)

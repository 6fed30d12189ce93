"""Fused RMSNorm and LayerNorm, optionally with the residual add before them (one pass over memory).

Llama blocks compute `h = x + residual; y = norm(h)`: read x and residual, write h (the new
residual stream) and y. Fused, each of the four tensors crosses DRAM once. Statistics are in fp32,
outputs in x's dtype, and the casts follow the models exactly: RMSNorm as `agnitra.models.llama`
(normalise in fp32, round to x's dtype, then multiply by the weight), LayerNorm as
`torch.nn.functional.layer_norm` (one rounding at the end).

Each program owns ROWS_PER_PROGRAM rows (several for short rows, so a program has enough work).
When BLOCK_N >= N the rows stay in registers between the statistics and the output (one pass);
otherwise the program loops over chunks of BLOCK_N columns twice: statistics (and h) first, then
the output, re-reading the row, usually from L2.

Four parts (Triton's tutorial layout, 02-fused-softmax and 05-layer-norm): the kernels, the host
wrappers `rms_norm` / `layer_norm`, the PyTorch references, and the `KernelSpec`s "rms_norm",
"rms_norm_residual", "layer_norm", "layer_norm_residual" (shape = (rows, N)).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from agnitra.errors import NotApplicable
from agnitra.kernels.pdl import pdl_options, pdl_wait
from agnitra.kernels.spec import KernelSpec, pow2_bucket, register_kernel, triton_available

from agnitra.kernels._triton import tl, triton


# ---------------------------------------------------------------------------------------------
# 1. kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _load_rows(x_ptr, r_ptr, h_ptr, rows, cols, mask, stride_xm, stride_rm, stride_hm, HAS_RESIDUAL: tl.constexpr):
    """x[rows, cols] in fp32; with a residual, h = x + residual is stored (in x's dtype, as
    `x + residual` keeps the residual stream in PyTorch) and returned in its place."""
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + rows[:, None] * stride_rm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(x_ptr.dtype.element_ty)
        tl.store(h_ptr + rows[:, None] * stride_hm + cols[None, :], h, mask=mask)
        x = h.to(tl.float32)
    return x


@triton.jit
def _rms_norm_kernel(
    x_ptr,  # *x [M, N]: the rows to normalise (columns contiguous)
    r_ptr,  # *residual [M, N]: added to x first (read only when HAS_RESIDUAL)
    w_ptr,  # *weight [N]: per-column gain
    y_ptr,  # *out [M, N]: normalised rows, x's dtype
    h_ptr,  # *residual_out [M, N]: x + residual in x's dtype (written only when HAS_RESIDUAL)
    stride_xm,  # elements between rows of x
    stride_rm,  # elements between rows of residual
    stride_ym,  # elements between rows of out
    stride_hm,  # elements between rows of residual_out
    M,  # number of rows
    N,  # row length
    eps,  # added to mean(x^2) before the reciprocal square root
    HAS_RESIDUAL: tl.constexpr,  # compute h = x + residual, store it, normalise h
    BLOCK_N: tl.constexpr,  # columns per chunk, a power of two
    ROWS_PER_PROGRAM: tl.constexpr,  # rows handled by one program, a power of two
    SINGLE_PASS: tl.constexpr,  # BLOCK_N >= N: the rows stay in registers
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch (`kernels.pdl`)
):
    pdl_wait(PDL)  # everything read here comes from earlier kernels: wait for them, then let the next kernel in
    pid = tl.program_id(0)
    rows = pid * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)  # [R]
    row_mask = rows < M
    rows = rows.to(tl.int64)  # row * stride can pass 2^31 elements
    cols = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    dtype = x_ptr.dtype.element_ty
    if SINGLE_PASS:
        # one pass: the rows stay in registers
        mask = row_mask[:, None] & (cols[None, :] < N)  # [R, BLOCK_N]
        x = _load_rows(x_ptr, r_ptr, h_ptr, rows, cols, mask, stride_xm, stride_rm, stride_hm, HAS_RESIDUAL)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)  # [R]
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        normed = (x * rstd[:, None]).to(dtype)  # llama.RMSNorm: normed.type_as(x) * weight
        y = normed.to(tl.float32) * w[None, :]
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(dtype), mask=mask)
    else:
        # pass 1: sum of squares over chunks (and h = x + residual, stored)
        acc = tl.zeros([ROWS_PER_PROGRAM, BLOCK_N], dtype=tl.float32)
        for off in range(0, N, BLOCK_N):
            c = off + cols
            mask = row_mask[:, None] & (c[None, :] < N)
            x = _load_rows(x_ptr, r_ptr, h_ptr, rows, c, mask, stride_xm, stride_rm, stride_hm, HAS_RESIDUAL)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + eps)  # [R]
        if HAS_RESIDUAL:
            src_ptr = h_ptr  # pass 2 normalises h: one tensor to re-read instead of two
            stride_sm = stride_hm
            tl.debug_barrier()  # h written by the program's other threads is visible below
        else:
            src_ptr = x_ptr
            stride_sm = stride_xm
        # pass 2: normalise and scale
        for off in range(0, N, BLOCK_N):
            c = off + cols
            mask = row_mask[:, None] & (c[None, :] < N)
            x = tl.load(src_ptr + rows[:, None] * stride_sm + c[None, :], mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
            normed = (x * rstd[:, None]).to(dtype)
            y = normed.to(tl.float32) * w[None, :]
            tl.store(y_ptr + rows[:, None] * stride_ym + c[None, :], y.to(dtype), mask=mask)


@triton.jit
def _layer_norm_kernel(
    x_ptr,  # *x [M, N]: the rows to normalise (columns contiguous)
    r_ptr,  # *residual [M, N]: added to x first (read only when HAS_RESIDUAL)
    w_ptr,  # *weight [N]: per-column gain (read only when HAS_WEIGHT)
    b_ptr,  # *bias [N]: per-column offset (read only when HAS_BIAS)
    y_ptr,  # *out [M, N]: normalised rows, x's dtype
    h_ptr,  # *residual_out [M, N]: x + residual in x's dtype (written only when HAS_RESIDUAL)
    stride_xm,  # elements between rows of x
    stride_rm,  # elements between rows of residual
    stride_ym,  # elements between rows of out
    stride_hm,  # elements between rows of residual_out
    M,  # number of rows
    N,  # row length
    eps,  # added to the (biased) variance before the reciprocal square root
    HAS_RESIDUAL: tl.constexpr,  # compute h = x + residual, store it, normalise h
    HAS_WEIGHT: tl.constexpr,  # multiply by weight
    HAS_BIAS: tl.constexpr,  # add bias
    BLOCK_N: tl.constexpr,  # columns per chunk, a power of two
    ROWS_PER_PROGRAM: tl.constexpr,  # rows handled by one program, a power of two
    SINGLE_PASS: tl.constexpr,  # BLOCK_N >= N: the rows stay in registers
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch (`kernels.pdl`)
):
    pdl_wait(PDL)  # everything read here comes from earlier kernels: wait for them, then let the next kernel in
    pid = tl.program_id(0)
    rows = pid * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)  # [R]
    row_mask = rows < M
    rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    dtype = x_ptr.dtype.element_ty
    if SINGLE_PASS:
        # one pass: mean, then the variance of the centred row, both from registers
        mask = row_mask[:, None] & (cols[None, :] < N)  # [R, BLOCK_N]
        x = _load_rows(x_ptr, r_ptr, h_ptr, rows, cols, mask, stride_xm, stride_rm, stride_hm, HAS_RESIDUAL)
        mean = tl.sum(x, axis=1) / N  # [R]
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)  # [R]
        y = xc * rstd[:, None]
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        if HAS_BIAS:
            y = y + tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(dtype), mask=mask)
    else:
        # pass 1: each chunk's mean and sum of squared deviations, merged into the row's (Chan et
        # al.): as stable as two passes, without a third read of the row
        mean = tl.zeros([ROWS_PER_PROGRAM], dtype=tl.float32)
        m2 = tl.zeros([ROWS_PER_PROGRAM], dtype=tl.float32)
        n_a = tl.zeros([ROWS_PER_PROGRAM], dtype=tl.float32)  # columns merged so far
        for off in range(0, N, BLOCK_N):
            c = off + cols
            mask = row_mask[:, None] & (c[None, :] < N)
            x = _load_rows(x_ptr, r_ptr, h_ptr, rows, c, mask, stride_xm, stride_rm, stride_hm, HAS_RESIDUAL)
            n_b = tl.sum((c < N).to(tl.float32), axis=0)  # columns in this chunk
            mean_b = tl.sum(x, axis=1) / n_b
            xc = tl.where(mask, x - mean_b[:, None], 0.0)
            m2_b = tl.sum(xc * xc, axis=1)
            delta = mean_b - mean
            n = n_a + n_b
            mean = mean + delta * (n_b / n)
            m2 = m2 + m2_b + delta * delta * (n_a * n_b / n)
            n_a = n
        rstd = tl.rsqrt(m2 / N + eps)  # [R]
        if HAS_RESIDUAL:
            src_ptr = h_ptr
            stride_sm = stride_hm
            tl.debug_barrier()  # h written by the program's other threads is visible below
        else:
            src_ptr = x_ptr
            stride_sm = stride_xm
        # pass 2: normalise, scale, shift
        for off in range(0, N, BLOCK_N):
            c = off + cols
            mask = row_mask[:, None] & (c[None, :] < N)
            x = tl.load(src_ptr + rows[:, None] * stride_sm + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)[None, :]
            if HAS_BIAS:
                y = y + tl.load(b_ptr + c, mask=c < N, other=0.0).to(tl.float32)[None, :]
            tl.store(y_ptr + rows[:, None] * stride_ym + c[None, :], y.to(dtype), mask=mask)


# ---------------------------------------------------------------------------------------------
# 2. host wrappers
# ---------------------------------------------------------------------------------------------

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_TILE = 16384  # fp32 elements one program keeps in registers (64 KiB): larger rows go in chunks
CHUNKS = (1024, 2048, 4096, 8192)  # BLOCK_N of the two-pass path
ROWS = (1, 2, 4, 8, 16, 32, 64)  # ROWS_PER_PROGRAM
WARPS = (1, 2, 4, 8, 16)


def _is_pow2(n: Any) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def _rows_view(t: torch.Tensor, n: int) -> torch.Tensor:
    """t [..., n] as [M, n] with contiguous columns (a view where possible)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(1) == 1 or t2.shape[0] == 0 else t2.contiguous()


def _output(buf: torch.Tensor | None, like: torch.Tensor, n: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(the tensor returned, its [M, n] view the kernel writes)."""
    if buf is None:
        buf = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    elif buf.shape != like.shape or buf.dtype != like.dtype or buf.device != like.device:
        raise ValueError(f"{name} must be {tuple(like.shape)} {like.dtype} on {like.device}, got {tuple(buf.shape)} {buf.dtype} on {buf.device}")
    view = buf.view(-1, n)  # raises when the kernel's writes could not reach buf
    if view.stride(1) != 1:
        raise ValueError(f"{name} needs contiguous columns")
    return buf, view


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    for key in ("BLOCK_N", "ROWS_PER_PROGRAM", "num_warps"):
        if not _is_pow2(config.get(key)):
            raise ValueError(f"config {key} must be a power of two, got {config.get(key)!r}")
    return config


def _launch(
    kind: str,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    residual: torch.Tensor | None,
    config: dict[str, Any] | None,
    out: torch.Tensor | None,
    residual_out: torch.Tensor | None,
):
    usable, reason = triton_available(x.device)
    if not usable:
        raise NotApplicable(reason)
    if x.dtype not in DTYPES:
        raise ValueError(f"{kind}: x must be float16, bfloat16 or float32, got {x.dtype}")
    N = x.shape[-1]
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (p.numel() != N or p.device != x.device):
            raise ValueError(f"{kind}: {name} must have {N} elements on {x.device}, got {tuple(p.shape)} on {p.device}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device):
        raise ValueError(f"{kind}: residual must match x ({tuple(x.shape)} {x.dtype}), got {tuple(residual.shape)} {residual.dtype}")
    if x.numel() == 0:
        out = torch.empty_like(x) if out is None else out
        return (out, torch.empty_like(x) if residual_out is None else residual_out) if residual is not None else out
    x2 = _rows_view(x, N)  # [M, N]
    M = x2.shape[0]
    r2 = _rows_view(residual, N) if residual is not None else x2  # [M, N]
    out, y2 = _output(out, x, N, "out")
    if residual is not None:
        residual_out, h2 = _output(residual_out, x, N, "residual_out")
    else:
        h2 = y2  # not written
    shape = (M, N)
    cfg = check_config(dict(config) if config else default_config(shape, x.dtype))
    R, BLOCK_N = cfg["ROWS_PER_PROGRAM"], cfg["BLOCK_N"]
    grid = (triton.cdiv(M, R),)
    w = weight.contiguous() if weight is not None else x2  # placeholder pointer when absent
    if kind == "rms_norm":
        _rms_norm_kernel[grid](
            x2, r2, w, y2, h2,
            x2.stride(0), r2.stride(0), y2.stride(0), h2.stride(0),
            M, N, eps,
            HAS_RESIDUAL=residual is not None, BLOCK_N=BLOCK_N, ROWS_PER_PROGRAM=R, SINGLE_PASS=BLOCK_N >= N,
            num_warps=cfg["num_warps"], **pdl_options(x2, {"PDL": "wait"}),
        )
    else:
        b = bias.contiguous() if bias is not None else w
        _layer_norm_kernel[grid](
            x2, r2, w, b, y2, h2,
            x2.stride(0), r2.stride(0), y2.stride(0), h2.stride(0),
            M, N, eps,
            HAS_RESIDUAL=residual is not None, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
            BLOCK_N=BLOCK_N, ROWS_PER_PROGRAM=R, SINGLE_PASS=BLOCK_N >= N,
            num_warps=cfg["num_warps"], **pdl_options(x2, {"PDL": "wait"}),
        )
    return (out, residual_out) if residual is not None else out


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    config: dict[str, Any] | None = None,
    *,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
):
    """RMSNorm of x [..., N] with weight [N], as `llama.RMSNorm`; output in x's dtype.

    With `residual` (same shape and dtype as x): h = x + residual, then RMSNorm(h); returns
    (normed, h). `out` / `residual_out` are written in place when given (they may be x /
    residual themselves). `config`: BLOCK_N, ROWS_PER_PROGRAM, num_warps (default: `default_config`).
    """
    return _launch("rms_norm", x, weight, None, eps, residual, config, out, residual_out)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    residual: torch.Tensor | None = None,
    config: dict[str, Any] | None = None,
    *,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
):
    """`F.layer_norm(x, (N,), weight, bias, eps)` over the last dimension; output in x's dtype.

    With `residual`: h = x + residual, then the norm of h; returns (normed, h). `out` /
    `residual_out` as in `rms_norm`.
    """
    return _launch("layer_norm", x, weight, bias, eps, residual, config, out, residual_out)


def configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    """Single pass (BLOCK_N = the power of two >= N, several rows per program for short rows)
    while a program's tile fits MAX_TILE, and two passes over chunks of 1024..8192 columns."""
    M, N = shape
    n2, m2 = pow2_bucket(N), pow2_bucket(M)
    space = []
    if n2 <= MAX_TILE:
        for R in ROWS:
            tile = R * n2
            if tile > MAX_TILE or (R > 1 and R > m2):
                break
            for w in WARPS:
                if (w == 1 or 32 * w <= tile) and tile <= 32 * w * 64:  # 1..64 elements a thread
                    space.append({"BLOCK_N": n2, "ROWS_PER_PROGRAM": R, "num_warps": w})
    for block in CHUNKS:
        if block < N:
            space += [{"BLOCK_N": block, "ROWS_PER_PROGRAM": 1, "num_warps": w} for w in (4, 8, 16)]
    return space


def default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    """One pass when the row fits, ~1024 elements a program for short rows, 16 a thread."""
    M, N = shape
    n2 = pow2_bucket(N)
    if n2 > MAX_TILE:
        return {"BLOCK_N": 4096, "ROWS_PER_PROGRAM": 1, "num_warps": 8}
    R = max(1, min(1024 // n2, pow2_bucket(M), ROWS[-1]))
    return {"BLOCK_N": n2, "ROWS_PER_PROGRAM": R, "num_warps": max(1, min(R * n2 // 512, 16))}


# ---------------------------------------------------------------------------------------------
# 3. references (PyTorch; any dtype, float64 included)
# ---------------------------------------------------------------------------------------------


def _acc(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def rms_norm_reference(x, weight, eps, residual=None):
    """llama.RMSNorm, output in x's dtype; with residual: (RMSNorm(x + residual), x + residual)."""
    h = x + residual if residual is not None else x
    hf = h.to(_acc(h))
    normed = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    y = (normed.type_as(h) * weight).to(h.dtype)
    return (y, h) if residual is not None else y


def layer_norm_reference(x, weight, bias, eps, residual=None):
    h = x + residual if residual is not None else x
    acc = _acc(h)
    w = weight.to(acc) if weight is not None else None
    b = bias.to(acc) if bias is not None else None
    y = F.layer_norm(h.to(acc), (h.shape[-1],), w, b, eps).to(h.dtype)
    return (y, h) if residual is not None else y


# ---------------------------------------------------------------------------------------------
# 4. kernel specs (shape = (rows, N); eps 1e-5, Llama's)
# ---------------------------------------------------------------------------------------------

EPS = 1e-5


def _randn(shape, dtype, device, gen, scale=1.0, shift=0.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, device=device) * scale + shift).to(dtype)


def _make_inputs(residual: bool, layer: bool):
    def make(shape, dtype, device, seed):
        M, N = shape
        gen = torch.Generator(device=device).manual_seed(seed)
        x = _randn((M, N), dtype, device, gen, shift=0.5 if layer else 0.0)  # [M, N]
        inputs = [x]
        if residual:
            inputs.append(_randn((M, N), dtype, device, gen))  # residual [M, N]
        inputs.append(_randn((N,), dtype, device, gen, scale=0.1, shift=1.0))  # weight [N]
        if layer:
            inputs.append(_randn((N,), dtype, device, gen, scale=0.1))  # bias [N]
        if residual:
            inputs.append(torch.empty((2, M, N), dtype=dtype, device=device))  # (normed, h) written here
        return tuple(inputs)

    return make


# The residual variants write (normed, h) into the last input, a [2, M, N] buffer, and return it:
# one tensor to compare with the reference, and no copy inside the timed call.
def _rms_launch(x, weight, config=None):
    return rms_norm(x, weight, EPS, config=config)


def _rms_residual_launch(x, residual, weight, buf, config=None):
    rms_norm(x, weight, EPS, residual, config, out=buf[0], residual_out=buf[1])
    return buf


def _rms_residual_reference(x, residual, weight, buf=None):
    return torch.stack(rms_norm_reference(x, weight, EPS, residual))


def _ln_launch(x, weight, bias, config=None):
    return layer_norm(x, weight, bias, EPS, config=config)


def _ln_residual_launch(x, residual, weight, bias, buf, config=None):
    layer_norm(x, weight, bias, EPS, residual, config, out=buf[0], residual_out=buf[1])
    return buf


def _ln_residual_reference(x, residual, weight, bias, buf=None):
    return torch.stack(layer_norm_reference(x, weight, bias, EPS, residual))


def _bytes(residual: bool, layer: bool):
    def count(shape, dtype) -> float:
        M, N = shape
        rows = 2 + (2 if residual else 0)  # x, out (+ residual, h)
        params = 2 if layer else 1  # weight (+ bias)
        return float((rows * M * N + params * N) * dtype.itemsize)

    return count


def _bucket(shape) -> str:
    M, N = shape
    return f"M{pow2_bucket(M)}xN{pow2_bucket(N)}"


for _name, _launcher, _reference, _residual, _layer in (
    ("rms_norm", _rms_launch, lambda x, w: rms_norm_reference(x, w, EPS), False, False),
    ("rms_norm_residual", _rms_residual_launch, _rms_residual_reference, True, False),
    ("layer_norm", _ln_launch, lambda x, w, b: layer_norm_reference(x, w, b, EPS), False, True),
    ("layer_norm_residual", _ln_residual_launch, _ln_residual_reference, True, True),
):
    register_kernel(
        KernelSpec(
            name=_name,
            configs=configs,
            default_config=default_config,
            launch=_launcher,
            reference=_reference,
            make_inputs=_make_inputs(_residual, _layer),
            # opcount's convention: rms_norm 4 FLOPs an element, layer_norm 8, the residual add 1
            flops=lambda shape, per=(8 if _layer else 4) + (1 if _residual else 0): float(per * shape[0] * shape[1]),
            bytes=_bytes(_residual, _layer),
            bucket=_bucket,
        )
    )

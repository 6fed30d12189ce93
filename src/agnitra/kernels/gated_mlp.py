"""The gated activation of a SwiGLU / GeGLU feed-forward block: act(gate) * up, one pass.

Llama's FeedForward is `w2(silu(w1 x) * w3 x)`: between the projections PyTorch runs silu (read
the gate, write it) and the product (read both, write): five tensor passes where this kernel makes
three (read gate and up, write the product). With w1 and w3 fused into one projection, its output
[..., 2H] (gate first, up second) is read in place by `gated_activation_packed`, no split copy.

The arithmetic is in fp32 and follows PyTorch's casts (`F.silu(a) * b` in a's dtype: the
activation rounded to the dtype, then the product), so the result matches eager bit for bit up to
the exp / erf implementations. Activations: "silu", "gelu" (erf, exact), "gelu_tanh".

Four parts (Triton's tutorial layout): the kernel, the host wrappers, the PyTorch reference, and
the `KernelSpec`s "silu_mul" and "gelu_mul" (shape = (rows, H)).
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
# 1. kernel
# ---------------------------------------------------------------------------------------------


@triton.jit
def _gated_activation_kernel(
    a_ptr,  # *gate [M, H]: goes through the activation (columns contiguous)
    b_ptr,  # *up [M, H]: multiplies the activation
    y_ptr,  # *out [M, H]: act(gate) * up, the inputs' dtype
    stride_am,  # elements between rows of gate (2H when gate and up are halves of one tensor)
    stride_bm,  # elements between rows of up
    stride_ym,  # elements between rows of out
    M,  # number of rows
    H,  # row length
    ACTIVATION: tl.constexpr,  # "silu", "gelu" (erf) or "gelu_tanh"
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_H: tl.constexpr,  # columns per program
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch (`kernels.pdl`)
):
    pdl_wait(PDL)  # everything read here comes from earlier kernels: wait for them, then let the next kernel in
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    mask = (rows < M)[:, None] & (cols < H)[None, :]  # [BLOCK_M, BLOCK_H]
    rows = rows.to(tl.int64)
    a = tl.load(a_ptr + rows[:, None] * stride_am + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + rows[:, None] * stride_bm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if ACTIVATION == "silu":
        act = a * tl.sigmoid(a)
    elif ACTIVATION == "gelu":
        act = 0.5 * a * (1.0 + tl.math.erf(a * 0.7071067811865476))  # x Phi(x)
    else:  # gelu_tanh: 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        act = a * tl.sigmoid(1.5957691216057308 * (a + 0.044715 * a * a * a))
    dtype = y_ptr.dtype.element_ty
    act = act.to(dtype).to(tl.float32)  # PyTorch rounds the activation to the dtype first
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], (act * b).to(dtype), mask=mask)


# ---------------------------------------------------------------------------------------------
# 2. host wrappers
# ---------------------------------------------------------------------------------------------

ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _rows_view(t: torch.Tensor, n: int) -> torch.Tensor:
    """t [..., n] as [M, n] with contiguous columns (a view where possible)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(1) == 1 or t2.shape[0] == 0 else t2.contiguous()


def _launch(a2: torch.Tensor, b2: torch.Tensor, out_shape, activation: str, config: dict[str, Any] | None, out: torch.Tensor | None) -> torch.Tensor:
    usable, reason = triton_available(a2.device)
    if not usable:
        raise NotApplicable(reason)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if a2.dtype not in DTYPES:
        raise ValueError(f"gated_activation: inputs must be float16, bfloat16 or float32, got {a2.dtype}")
    M, H = a2.shape
    if out is None:
        out = torch.empty(out_shape, dtype=a2.dtype, device=a2.device)
    elif tuple(out.shape) != tuple(out_shape) or out.dtype != a2.dtype or out.device != a2.device:
        raise ValueError(f"out must be {tuple(out_shape)} {a2.dtype} on {a2.device}, got {tuple(out.shape)} {out.dtype}")
    y2 = out.view(-1, H) if H else out  # [M, H]; raises when the kernel's writes could not reach out
    if M == 0 or H == 0:
        return out
    if y2.stride(1) != 1:
        raise ValueError("out needs contiguous columns")
    cfg = check_config(dict(config) if config else default_config((M, H), a2.dtype))
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(H, cfg["BLOCK_H"]))
    _gated_activation_kernel[grid](
        a2, b2, y2,
        a2.stride(0), b2.stride(0), y2.stride(0),
        M, H,
        ACTIVATION=activation, BLOCK_M=cfg["BLOCK_M"], BLOCK_H=cfg["BLOCK_H"],
        num_warps=cfg["num_warps"], **pdl_options(a2, {"PDL": "wait"}),
    )
    return out


def gated_activation(
    a: torch.Tensor, b: torch.Tensor, activation: str = "silu", config: dict[str, Any] | None = None, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """act(a) * b for a, b [..., H] of one shape and dtype; output in that dtype."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"gated_activation: a and b must match, got {tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype}")
    H = a.shape[-1] if a.dim() else 1
    return _launch(_rows_view(a, H), _rows_view(b, H), a.shape, activation, config, out)


def gated_activation_packed(
    ab: torch.Tensor, activation: str = "silu", config: dict[str, Any] | None = None, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """act(gate) * up for ab [..., 2H] = cat(gate, up) (a fused w1|w3 projection) -> [..., H]."""
    if ab.dim() == 0 or ab.shape[-1] % 2:
        raise ValueError(f"gated_activation_packed: the last dimension must be even (gate | up), got {tuple(ab.shape)}")
    H = ab.shape[-1] // 2
    ab2 = _rows_view(ab, 2 * H)  # [M, 2H]
    return _launch(ab2[:, :H], ab2[:, H:], (*ab.shape[:-1], H), activation, config, out)


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    for key in ("BLOCK_M", "BLOCK_H", "num_warps"):
        v = config.get(key)
        if not (isinstance(v, int) and v > 0 and v & (v - 1) == 0):
            raise ValueError(f"config {key} must be a power of two, got {v!r}")
    return config


def configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    """Tiles of 256..8192 elements (BLOCK_H up to 4096 columns, BLOCK_M rows), 4..16 a thread."""
    M, H = shape
    m2, h2 = pow2_bucket(M), pow2_bucket(H)
    space = []
    for block_h in sorted({min(h2, b) for b in (256, 512, 1024, 2048, 4096)}):
        for block_m in (1, 2, 4, 8, 16):
            tile = block_m * block_h
            if (block_m > 1 and block_m > m2) or tile > 8192:
                continue
            if tile < 256 and block_m < min(m2, 16):  # short rows: group more of them
                continue
            for w in (1, 2, 4, 8, 16):
                if 4 * 32 * w <= max(tile, 128) and tile <= 16 * 32 * w:
                    space.append({"BLOCK_M": block_m, "BLOCK_H": block_h, "num_warps": w})
    return space


def default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    """About 2048 elements a program, 8 a thread (one 16-byte access for 16-bit types)."""
    M, H = shape
    block_h = min(pow2_bucket(H), 1024)
    block_m = max(1, min(2048 // block_h, pow2_bucket(M), 16))
    return {"BLOCK_M": block_m, "BLOCK_H": block_h, "num_warps": max(1, min(block_m * block_h // 256, 16))}


# ---------------------------------------------------------------------------------------------
# 3. reference (PyTorch; any dtype, float64 included)
# ---------------------------------------------------------------------------------------------


def activation_fn(activation: str):
    return {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[activation]


def gated_activation_reference(a: torch.Tensor, b: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """Eager PyTorch, as in llama.FeedForward: act(a) * b in the inputs' dtype."""
    return activation_fn(activation)(a) * b


# ---------------------------------------------------------------------------------------------
# 4. kernel specs (shape = (rows, H))
# ---------------------------------------------------------------------------------------------


def _make_inputs(shape, dtype, device, seed):
    M, H = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    a = (torch.randn((M, H), generator=gen, device=device) * 2).to(dtype)  # gate [M, H]
    b = torch.randn((M, H), generator=gen, device=device).to(dtype)  # up [M, H]
    return a, b


def _bucket(shape) -> str:
    M, H = shape
    return f"M{pow2_bucket(M)}xH{pow2_bucket(H)}"


for _name, _activation, _per_element in (("silu_mul", "silu", 4), ("gelu_mul", "gelu", 8)):
    register_kernel(
        KernelSpec(
            name=_name,
            configs=configs,
            default_config=default_config,
            launch=lambda a, b, config=None, act=_activation: gated_activation(a, b, act, config),
            reference=lambda a, b, act=_activation: gated_activation_reference(a, b, act),
            make_inputs=_make_inputs,
            # opcount's convention for the activation (silu 4, gelu 8 an element) + 1 for the product
            flops=lambda shape, per=_per_element + 1: float(per * shape[0] * shape[1]),
            bytes=lambda shape, dtype: float(3 * shape[0] * shape[1] * dtype.itemsize),  # read a, b; write out
            bucket=_bucket,
        )
    )

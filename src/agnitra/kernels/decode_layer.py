"""A Llama decode step in five kernels a layer: norm, projection and epilogue fused across modules.

At batch 1 a decode step is launch-bound: torch.compile's Llama step runs about a dozen kernels
a layer, each a few microseconds whatever its size. Here a layer is five launches:

1. `qkv_rope_cache`: RMSNorm(x) @ Wqkv^T, rotary embedding of q and k, k and v written into the
   KV cache at the step's position; returns q.
2. `decode_attention`: q against the cache's positions 0..pos (online softmax), GQA by head index.
3. `norm_gemv` with a residual: h = x + o @ Wo^T.
4. `gated_norm_gemv`: silu(RMSNorm(h) @ W1^T) * (RMSNorm(h) @ W3^T), W1|W3 stacked.
5. `norm_gemv` with a residual: h + a @ W2^T.

The model's head is `norm_gemv` with the final norm (no residual).

How the norm folds into the projection: RMSNorm(x)_k = x_k g_k r with r = rsqrt(mean(x^2) + eps)
one scalar per row, so (RMSNorm(x) @ W^T)_n = r * sum_k W_nk (x_k g_k). The kernel reads x in
the chunks its K loop reads anyway, multiplies by the gain, and sums x^2 beside the product;
r multiplies the result once. No extra pass, no normalised copy in memory.

Paired rows: the gated and rotary epilogues need two output rows together (gate n with up n;
element i of a head with element i + D/2). Each program keeps two accumulators over the two row
sets it owns, so the epilogue is elementwise. The rotary layout is Llama's (HF): the two halves of
each head rotate as (a, b) -> (a cos - b sin, b cos + a sin).

Weights: int8 rows with per-row scales (the int8 weight-only format; integer to float without a
conversion instruction, as in `quant.int8`) or floating point (no scales). One program owns
BLOCK_N rows (or pairs) of one row of x and walks K; no split-K (the epilogues need whole sums).
Numerics: fp32 throughout, one rounding to the activation dtype at the store.

On Hopper the kernels launch with programmatic dependent launch (`kernels.pdl`):
a GEMV reads its scales and first weight tiles, then waits for the kernel before it; each lets
the next in after its main loop (what it gained: docs/kernels.md).

Four parts (Triton's tutorial layout): kernels, host wrappers, PyTorch references, KernelSpecs
("decode_gemv", "decode_gemv_gated", "decode_attention"; `qkv_rope_cache` runs the GEMV kernel
with the rotary epilogue and is tuned as "decode_gemv" of its shape).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from agnitra.kernels._triton import jit_kernel, tl
from agnitra.kernels.pdl import _pdl_trigger, _pdl_wait, pdl_options, pdl_trigger_refinements
from agnitra.kernels.quant.common import _cdiv, _check_device
from agnitra.kernels.quant.int8 import _int8_to_f32, quantize_int8_per_channel
from agnitra.kernels.spec import KernelSpec, pow2_bucket, register_kernel

EPILOGUES = ("none", "residual", "gated", "rope")


# ============================================================================================
# Part 1: Triton kernels
# ============================================================================================


def _decode_gemv_kernel(
    x_ptr,  # [M, K] input rows (the residual stream when NORM)
    g_ptr,  # [K] RMSNorm gain (NORM)
    w_ptr,  # [N, K] weight rows, int8 (W_INT8) or float
    s_ptr,  # [N] per-row scales (HAS_SCALE)
    r_ptr,  # [M, P] residual added to the output (EPILOGUE "residual")
    y_ptr,  # [M, P] output; "rope": q only, [M, Q_ROWS]
    cos_ptr, sin_ptr,  # [HALF] fp32 rotary row of this step's position ("rope")
    pos_ptr,  # [1] integer position: the cache slot written ("rope")
    kc_ptr, vc_ptr,  # [B, H_kv, S, D] caches ("rope")
    P, K,  # programs' outputs (pairs for "gated" / "rope") and input features
    eps,  # RMSNorm epsilon
    stride_xm, stride_wn, stride_rm, stride_ym,  # row strides (last dimensions contiguous)
    stride_cb, stride_ch, stride_cs,  # cache strides: batch, head, slot (D contiguous)
    PAIR_OFFSET,  # "gated": rows of the second set start here (= P, the up rows)
    Q_ROWS, KV_ROWS,  # "rope": rows of q (H * D) and of k (H_kv * D)
    NORM: tl.constexpr,  # fold RMSNorm(x) * g into the product
    W_INT8: tl.constexpr,  # int8 weight rows
    HAS_SCALE: tl.constexpr,  # per-row scales multiply the sums
    EPILOGUE: tl.constexpr,  # "none" | "residual" | "gated" | "rope"
    HALF: tl.constexpr,  # "rope": D / 2
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0
    PREFETCH: tl.constexpr,  # load step k+1's weight tiles before computing step k (bytes in flight)
    BLOCK_N: tl.constexpr,  # outputs (pairs) per program
    BLOCK_K: tl.constexpr,  # input features per loop step
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch (`pdl._pdl_trigger`)
):
    PAIRED: tl.constexpr = EPILOGUE == "gated" or EPILOGUE == "rope"
    pid_n = tl.program_id(axis=0)
    m = tl.program_id(axis=1)
    p = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN] output (pair) index
    valid = p < P
    p_in = p % P  # out-of-range programs' rows wrap: valid addresses, stores masked
    if EPILOGUE == "rope":
        rows_a = (p_in // HALF) * (2 * HALF) + p_in % HALF  # element i of a head ...
        rows_b = rows_a + HALF  # ... and element i + D/2
    elif EPILOGUE == "gated":
        rows_a = p_in
        rows_b = p_in + PAIR_OFFSET
    else:
        rows_a = p_in
        rows_b = p_in
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + m * stride_xm + offs_k  # [BK]
    wa_ptrs = w_ptr + rows_a[:, None].to(tl.int64) * stride_wn + offs_k[None, :]  # [BN, BK]
    wb_ptrs = w_ptr + rows_b[:, None].to(tl.int64) * stride_wn + offs_k[None, :]
    acc_a = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    sq = tl.zeros((BLOCK_K,), dtype=tl.float32)
    # the epilogue's operands, read before the loop: read after it, each load waits for the sums'
    # barriers (no load moves above one), a memory round trip more at the end of every program
    if HAS_SCALE:
        scale_a = tl.load(s_ptr + rows_a).to(tl.float32)
        if PAIRED:
            scale_b = tl.load(s_ptr + rows_b).to(tl.float32)
    if PREFETCH:  # the weight tiles of step 0, requested before the loop
        wa_next = tl.load(wa_ptrs, mask=(offs_k < K)[None, :], other=0)
        wb_next = wa_next
        if PAIRED:
            wb_next = tl.load(wb_ptrs, mask=(offs_k < K)[None, :], other=0)
    _pdl_wait(PDL)  # under PDL: weights and scales above, what earlier kernels write (x, residual, rotary row, position) below
    if EPILOGUE == "residual":
        r = tl.load(r_ptr + m * stride_rm + p_in).to(tl.float32)
    if EPILOGUE == "rope":
        c = tl.load(cos_ptr + p_in % HALF)
        s = tl.load(sin_ptr + p_in % HALF)
        pos = tl.load(pos_ptr)
    for k0 in range(0, K, BLOCK_K):
        if PREFETCH:  # this step's tiles arrived during the last step; request the next step's now
            wa, wb = wa_next, wb_next
            ahead = (offs_k < K - k0 - BLOCK_K)[None, :]
            wa_next = tl.load(wa_ptrs + BLOCK_K, mask=ahead, other=0)
            if PAIRED:
                wb_next = tl.load(wb_ptrs + BLOCK_K, mask=ahead, other=0)
            k_mask = offs_k < K - k0
            x = tl.load(x_ptrs, mask=k_mask, other=0.0).to(tl.float32)
            if NORM:
                g = tl.load(g_ptr + k0 + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        elif EVEN_K:
            x = tl.load(x_ptrs).to(tl.float32)
            wa = tl.load(wa_ptrs)
            if PAIRED:
                wb = tl.load(wb_ptrs)
            if NORM:
                g = tl.load(g_ptr + k0 + offs_k).to(tl.float32)
        else:
            k_mask = offs_k < K - k0
            x = tl.load(x_ptrs, mask=k_mask, other=0.0).to(tl.float32)
            wa = tl.load(wa_ptrs, mask=k_mask[None, :], other=0)
            if PAIRED:
                wb = tl.load(wb_ptrs, mask=k_mask[None, :], other=0)
            if NORM:
                g = tl.load(g_ptr + k0 + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        if NORM:
            sq += x * x
            x = x * g
        # int8 by the integer-add trick, not the plain GEMV's prmt PTX (slower here: docs/kernels.md); in the
        # sm_90 code these tiles' bytes arrive one a register and are re-packed four a register for the asm
        wa = _int8_to_f32(wa, "") if W_INT8 else wa.to(tl.float32)
        acc_a += wa * x[None, :]
        if PAIRED:
            wb = _int8_to_f32(wb, "") if W_INT8 else wb.to(tl.float32)
            acc_b += wb * x[None, :]
        x_ptrs += BLOCK_K
        wa_ptrs += BLOCK_K
        wb_ptrs += BLOCK_K
    _pdl_trigger(PDL, 3)
    a = tl.sum(acc_a, axis=1)  # [BN]
    b = tl.sum(acc_b, axis=1)
    if NORM:
        rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / K + eps)
        a = a * rstd
        b = b * rstd
    if HAS_SCALE:
        a = a * scale_a
        if PAIRED:
            b = b * scale_b
    dtype = y_ptr.dtype.element_ty
    if EPILOGUE == "none":
        tl.store(y_ptr + m * stride_ym + p, a.to(dtype), mask=valid)
    elif EPILOGUE == "residual":
        tl.store(y_ptr + m * stride_ym + p, (a + r).to(dtype), mask=valid)
    elif EPILOGUE == "gated":
        tl.store(y_ptr + m * stride_ym + p, (a * tl.sigmoid(a) * b).to(dtype), mask=valid)
    else:  # rope: q -> y; k (rotated), v (as is) -> the caches at slot pos
        is_q = rows_a < Q_ROWS
        is_k = (rows_a >= Q_ROWS) & (rows_a < Q_ROWS + KV_ROWS)
        is_v = rows_a >= Q_ROWS + KV_ROWS
        out_a = tl.where(is_v, a, a * c - b * s).to(dtype)
        out_b = tl.where(is_v, b, b * c + a * s).to(dtype)
        tl.store(y_ptr + m * stride_ym + rows_a, out_a, mask=valid & is_q)
        tl.store(y_ptr + m * stride_ym + rows_b, out_b, mask=valid & is_q)
        kv_row = tl.where(is_v, rows_a - Q_ROWS - KV_ROWS, rows_a - Q_ROWS)  # row in the k (or v) block
        kv_row = tl.where(is_q, 0, kv_row)
        slot = m * stride_cb + (kv_row // (2 * HALF)) * stride_ch + pos * stride_cs + kv_row % (2 * HALF)
        tl.store(kc_ptr + slot, out_a, mask=valid & is_k)
        tl.store(kc_ptr + slot + HALF, out_b, mask=valid & is_k)
        tl.store(vc_ptr + slot, out_a, mask=valid & is_v)
        tl.store(vc_ptr + slot + HALF, out_b, mask=valid & is_v)


def _decode_attention_kernel(
    q_ptr,  # [B, H * D] queries of this step (rotated)
    kc_ptr, vc_ptr,  # [B, H_kv, S, D] caches, filled up to and including slot pos
    pos_ptr,  # [1] integer position of this step
    o_ptr,  # [B, H * D] output
    stride_qm, stride_om,  # row strides
    stride_cb, stride_ch, stride_cs,  # cache strides (D contiguous)
    sm_scale,  # softmax scale (1 / sqrt(D))
    GROUPS: tl.constexpr,  # query heads per kv head
    D: tl.constexpr,  # head dimension (a power of two)
    BLOCK_S: tl.constexpr,  # cache slots per loop step
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch (`pdl._pdl_trigger`)
):
    _pdl_wait(PDL)  # everything read here comes from earlier kernels
    h = tl.program_id(axis=0)
    bi = tl.program_id(axis=1)
    kvh = h // GROUPS
    n_ctx = tl.load(pos_ptr).to(tl.int32) + 1
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + bi * stride_qm + h * D + offs_d).to(tl.float32) * sm_scale  # [D]
    base = bi.to(tl.int64) * stride_cb + kvh * stride_ch
    m_i = tl.full((1,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((1,), dtype=tl.float32)
    acc = tl.zeros((D,), dtype=tl.float32)
    for s0 in range(0, n_ctx, BLOCK_S):
        offs_s = s0 + tl.arange(0, BLOCK_S)
        live = offs_s < n_ctx
        kv_off = base + offs_s[:, None] * stride_cs + offs_d[None, :]  # [BS, D]
        k = tl.load(kc_ptr + kv_off, mask=live[:, None], other=0.0).to(tl.float32)
        scores = tl.where(live, tl.sum(k * q[None, :], axis=1), float("-inf"))  # [BS]
        m_new = tl.maximum(m_i, tl.max(scores, axis=0))  # [1]
        alpha = tl.exp(m_i - m_new)
        prob = tl.exp(scores - m_new)  # [BS]
        l_i = l_i * alpha + tl.sum(prob, axis=0)
        v = tl.load(vc_ptr + kv_off, mask=live[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(prob[:, None] * v, axis=0)
        m_i = m_new
    _pdl_trigger(PDL, 3)
    tl.store(o_ptr + bi * stride_om + h * D + offs_d, (acc / l_i).to(o_ptr.dtype.element_ty))


# ============================================================================================
# Part 2: host wrappers
# ============================================================================================


def _check_rows(name: str, t: torch.Tensor, k: int) -> None:
    if t.dim() != 2 or t.shape[1] != k or t.stride(1) != 1:
        raise ValueError(f"{name} must be [M, {k}] with contiguous rows, got {tuple(t.shape)} strides {t.stride()}")


def _check_weight(w: torch.Tensor, scales: torch.Tensor | None, k: int) -> None:
    if w.dim() != 2 or w.shape[1] != k or w.stride(1) != 1:
        raise ValueError(f"weight must be [N, {k}] with contiguous rows, got {tuple(w.shape)}")
    if (w.dtype == torch.int8) != (scales is not None):
        raise ValueError("int8 weights need per-row scales; float weights take none")
    if scales is not None and tuple(scales.shape) != (w.shape[0],):
        raise ValueError(f"scales must be [{w.shape[0]}], got {tuple(scales.shape)}")


def default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    """Several programs an SM (BLOCK_N 4..32 outputs), 512-feature steps, 4 warps (H100 tuning
    picked 4 x 512 at every llama-1b shape but the LM head's)."""
    m, p, k = shape[:3]
    block_n = 32
    while block_n > 4 and _cdiv(p, block_n) * m < 512:
        block_n //= 2
    return {"BLOCK_N": block_n, "BLOCK_K": min(512, pow2_bucket(k)), "num_warps": 4, "PREFETCH": False}


def configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    """BLOCK_N x BLOCK_K tiles of 1K..16K weights (long steps keep bytes in flight per SM), with
    and without prefetching the next step's tiles."""
    k = shape[2]
    return [
        {"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "PREFETCH": prefetch}
        for bn in (2, 4, 8, 16, 32)
        for bk in (256, 512, 1024, 2048)
        for w in (4, 8)
        for prefetch in (False, True)
        if bk <= max(256, pow2_bucket(k)) and 1024 <= bn * bk <= 16384 and bn * bk >= 32 * 16 * w
    ]


def _launch_gemv(x, w, scales, y, p, *, gain=None, eps=0.0, residual=None, epilogue="none", config=None, rope=None):
    m, k = x.shape
    cfg = {**default_config((m, p, k), x.dtype), **(config or {})}
    dummy = w if scales is None else scales
    cos, sin, pos, k_cache, v_cache, q_rows, kv_rows, half = rope or (dummy, dummy, dummy, y, y, 0, 0, 1)
    grid = (_cdiv(p, cfg["BLOCK_N"]), m)
    jit_kernel(_decode_gemv_kernel)[grid](
        x, gain if gain is not None else x, w, dummy, residual if residual is not None else x, y,
        cos, sin, pos, k_cache, v_cache,
        p, k, float(eps),
        x.stride(0), w.stride(0), residual.stride(0) if residual is not None else 0, y.stride(0),
        k_cache.stride(0) if rope else 0, k_cache.stride(1) if rope else 0, k_cache.stride(2) if rope else 0,
        p if epilogue == "gated" else 0, q_rows, kv_rows,
        NORM=gain is not None, W_INT8=w.dtype == torch.int8, HAS_SCALE=scales is not None,
        EPILOGUE=epilogue, HALF=half, EVEN_K=k % cfg["BLOCK_K"] == 0, PREFETCH=bool(cfg.get("PREFETCH", False)),
        BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], num_warps=int(cfg.get("num_warps", 4)), num_stages=int(cfg.get("num_stages", 2)),
        **pdl_options(x, cfg),
    )
    return y


def norm_gemv(x, weight, scales=None, gain=None, eps=1e-5, residual=None, config=None):
    """y [M, N] = (RMSNorm(x) * gain if gain is given else x) @ W^T * scales (+ residual)."""
    _check_rows("x", x, x.shape[-1])
    m, k = x.shape
    _check_weight(weight, scales, k)
    n = weight.shape[0]
    if residual is not None:
        _check_rows("residual", residual, n)
    _check_device(x)
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    return _launch_gemv(x, weight, scales, y, n, gain=gain, eps=eps, residual=residual, epilogue="residual" if residual is not None else "none", config=config)


def gated_norm_gemv(x, weight, scales=None, gain=None, eps=1e-5, config=None):
    """silu(a) * b for [a | b] = (RMSNorm(x) * gain) @ W^T * scales, W = W1|W3 stacked: [M, N/2]."""
    _check_rows("x", x, x.shape[-1])
    _check_weight(weight, scales, x.shape[1])
    if weight.shape[0] % 2:
        raise ValueError(f"gated: the stacked weight needs an even number of rows (gate | up), got {weight.shape[0]}")
    _check_device(x)
    p = weight.shape[0] // 2
    y = torch.empty((x.shape[0], p), device=x.device, dtype=x.dtype)
    return _launch_gemv(x, weight, scales, y, p, gain=gain, eps=eps, epilogue="gated", config=config)


def qkv_rope_cache(x, weight, scales, gain, eps, cos, sin, input_pos, k_cache, v_cache, n_heads, config=None):
    """q [M, H*D] of RMSNorm(x) @ Wqkv^T, rotated; k (rotated) and v written to the caches at input_pos.

    `cos`, `sin` [D/2] (or [1, D/2]) fp32: the rotary row of the position; caches [B >= M, H_kv, S, D].
    """
    _check_rows("x", x, x.shape[-1])
    _check_weight(weight, scales, x.shape[1])
    _, n_kv, _, d = k_cache.shape
    if k_cache.stride(3) != 1 or k_cache.stride() != v_cache.stride() or k_cache.shape != v_cache.shape:
        raise ValueError("k and v caches must be alike, [B, H_kv, S, D] with D contiguous")
    q_rows, kv_rows = n_heads * d, n_kv * d
    if weight.shape[0] != q_rows + 2 * kv_rows or d % 2:
        raise ValueError(f"weight has {weight.shape[0]} rows, expected q|k|v = {q_rows} + 2 x {kv_rows}")
    _check_device(x)
    y = torch.empty((x.shape[0], q_rows), device=x.device, dtype=x.dtype)
    rope = (cos.reshape(-1).float(), sin.reshape(-1).float(), input_pos, k_cache, v_cache, q_rows, kv_rows, d // 2)
    _launch_gemv(x, weight, scales, y, weight.shape[0] // 2, gain=gain, eps=eps, epilogue="rope", config=config, rope=rope)
    return y


def attention_default_config(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    return {"BLOCK_S": 64, "num_warps": 4}


def attention_configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    return [{"BLOCK_S": s, "num_warps": w} for s in (16, 32, 64, 128) for w in (1, 2, 4, 8)]


def decode_attention(q, k_cache, v_cache, input_pos, n_heads, config=None):
    """o [M, H*D]: each query head of q [M, H*D] over its kv head's cache slots 0..input_pos."""
    _, n_kv, _, d = k_cache.shape
    m = q.shape[0]
    if q.dim() != 2 or q.shape[1] != n_heads * d or q.stride(1) != 1 or n_heads % n_kv or d & (d - 1):
        raise ValueError(f"q must be [M, {n_heads} x {d}] (head dim a power of two, heads a multiple of {n_kv}), got {tuple(q.shape)}")
    if k_cache.stride(3) != 1 or k_cache.stride() != v_cache.stride():
        raise ValueError("k and v caches must be alike, [B, H_kv, S, D] with D contiguous")
    _check_device(q)
    cfg = {**attention_default_config((m, n_heads, d), q.dtype), **(config or {})}
    o = torch.empty_like(q)
    jit_kernel(_decode_attention_kernel)[(n_heads, m)](
        q, k_cache, v_cache, input_pos, o,
        q.stride(0), o.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        1.0 / math.sqrt(d), GROUPS=n_heads // n_kv, D=d, BLOCK_S=cfg["BLOCK_S"], num_warps=int(cfg.get("num_warps", 4)),
        **pdl_options(q, cfg),
    )
    return o


# ============================================================================================
# Part 3: PyTorch references (any dtype, float64 included)
# ============================================================================================


def _dequant(weight, scales, dt):
    w = weight.to(dt)
    return w * scales.to(dt)[:, None] if scales is not None else w


def rms_normed(x, gain, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain.to(x.dtype) if gain is not None else x


def norm_gemv_reference(x, weight, scales=None, gain=None, eps=1e-5, residual=None):
    y = rms_normed(x, gain, eps) @ _dequant(weight, scales, x.dtype).t()
    return y + residual.to(x.dtype) if residual is not None else y


def gated_norm_gemv_reference(x, weight, scales=None, gain=None, eps=1e-5):
    a, b = norm_gemv_reference(x, weight, scales, gain, eps).chunk(2, dim=-1)
    return F.silu(a) * b


def rotate(t, cos, sin):
    """Llama's rotary embedding of t [..., D] by cos, sin [D/2] (halves rotate together)."""
    half = t.shape[-1] // 2
    a, b = t[..., :half], t[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def qkv_rope_cache_reference(x, weight, scales, gain, eps, cos, sin, input_pos, k_cache, v_cache, n_heads):
    """The same as `qkv_rope_cache`, caches written in place (their dtype), q returned in x's dtype."""
    m = x.shape[0]
    _, n_kv, _, d = k_cache.shape
    qkv = norm_gemv_reference(x, weight, scales, gain, eps)
    q, k, v = qkv.split([n_heads * d, n_kv * d, n_kv * d], dim=-1)
    cos, sin = cos.reshape(-1).to(x.dtype), sin.reshape(-1).to(x.dtype)
    q = rotate(q.view(m, n_heads, d), cos, sin)
    k = rotate(k.view(m, n_kv, d), cos, sin)
    pos = int(input_pos.reshape(-1)[0])
    k_cache[:m, :, pos] = k.to(k_cache.dtype)
    v_cache[:m, :, pos] = v.view(m, n_kv, d).to(v_cache.dtype)
    return q.reshape(m, n_heads * d)


def decode_attention_reference(q, k_cache, v_cache, input_pos, n_heads):
    m = q.shape[0]
    _, n_kv, _, d = k_cache.shape
    n_ctx = int(input_pos.reshape(-1)[0]) + 1
    k = k_cache[:m, :, :n_ctx].to(q.dtype).repeat_interleave(n_heads // n_kv, dim=1)  # [M, H, S, D]
    v = v_cache[:m, :, :n_ctx].to(q.dtype).repeat_interleave(n_heads // n_kv, dim=1)
    scores = torch.einsum("mhd,mhsd->mhs", q.view(m, n_heads, d), k) / math.sqrt(d)
    return torch.einsum("mhs,mhsd->mhd", scores.softmax(-1), v).reshape(m, n_heads * d)


# ============================================================================================
# Part 4: kernel specs; GEMV shape = (M, outputs, K), attention shape = (M, H, D, H_kv, S)
# ============================================================================================


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _int8_rows(n, k, gen, device):
    """int8 weight rows [N, K] on `device` and their scales [N] (fp32, CPU): the transform's numerics."""
    q, scales = quantize_int8_per_channel(torch.randn(n, k, generator=gen, device="cpu") / k**0.5)
    return q.to(device), scales


def _gemv_inputs(epilogue):
    def make(shape, dtype, device, seed):
        m, p, k = shape[:3]
        gen = _gen(seed)
        n = 2 * p if epilogue == "gated" else p
        w, s = _int8_rows(n, k, gen, device)
        x = torch.randn(m, k, generator=gen, device="cpu").to(dtype).to(device)
        gain = (1 + 0.1 * torch.randn(k, generator=gen, device="cpu")).to(dtype).to(device)
        if epilogue == "gated":
            return x, w, s.to(dtype).to(device), gain, 1e-5
        residual = torch.randn(m, p, generator=gen, device="cpu").to(dtype).to(device)
        return x, w, s.to(dtype).to(device), gain, 1e-5, residual

    return make


def _gemv_bucket(shape) -> str:
    return f"M{pow2_bucket(shape[0])}_P{shape[1]}_K{shape[2]}"


register_kernel(KernelSpec(
    name="decode_gemv",
    configs=configs,
    default_config=default_config,
    launch=lambda x, w, s, g, eps, r, config=None: norm_gemv(x, w, s, g, eps, r, config),
    reference=norm_gemv_reference,
    make_inputs=_gemv_inputs("residual"),
    flops=lambda shape: 2.0 * shape[0] * shape[1] * shape[2],
    bytes=lambda shape, dtype: float(shape[1] * shape[2] + shape[0] * (shape[2] + 2 * shape[1]) * dtype.itemsize),
    bucket=_gemv_bucket,
    refinements=pdl_trigger_refinements,
))

register_kernel(KernelSpec(
    name="decode_gemv_gated",
    configs=configs,
    default_config=default_config,
    launch=lambda x, w, s, g, eps, config=None: gated_norm_gemv(x, w, s, g, eps, config),
    reference=gated_norm_gemv_reference,
    make_inputs=_gemv_inputs("gated"),
    flops=lambda shape: 4.0 * shape[0] * shape[1] * shape[2],
    bytes=lambda shape, dtype: float(2 * shape[1] * shape[2] + shape[0] * (shape[2] + shape[1]) * dtype.itemsize),
    bucket=_gemv_bucket,
    refinements=pdl_trigger_refinements,
))


def _attention_inputs(shape, dtype, device, seed):
    m, h, d, h_kv, s = shape
    gen = _gen(seed)
    q = torch.randn(m, h * d, generator=gen, device="cpu").to(dtype).to(device)
    k_cache = torch.randn(m, h_kv, s, d, generator=gen, device="cpu").to(dtype).to(device)
    v_cache = torch.randn(m, h_kv, s, d, generator=gen, device="cpu").to(dtype).to(device)
    return q, k_cache, v_cache, torch.tensor([s - 1], device=device), h


register_kernel(KernelSpec(
    name="decode_attention",
    configs=attention_configs,
    default_config=attention_default_config,
    launch=lambda q, kc, vc, pos, h, config=None: decode_attention(q, kc, vc, pos, h, config),
    reference=decode_attention_reference,
    make_inputs=_attention_inputs,
    flops=lambda shape: 4.0 * shape[0] * shape[1] * shape[2] * shape[4],
    bytes=lambda shape, dtype: float((2 * shape[0] * shape[3] * shape[4] * shape[2] + 2 * shape[0] * shape[1] * shape[2]) * dtype.itemsize),
    bucket=lambda shape: f"M{pow2_bucket(shape[0])}_H{shape[1]}_D{shape[2]}_S{pow2_bucket(shape[4])}",
))

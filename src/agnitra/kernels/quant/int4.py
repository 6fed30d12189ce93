"""int4 weight-only matmul: y [M, N] = x [M, K] @ W'^T (+ bias[N]), the entry points of every int4 kernel.

Format (`formats`): asymmetric per group of G consecutive input features, tinygemm's form,
W'[n, k] = (q[n, k] - 8) * scales[n, g] + zeros[n, g], g = k // G, codes q in 0..15 packed low
first (`w_packed` [N, K/2] uint8), scales and zeros [N, K/G] in any float dtype. The int4
transform's layout (high first, [K/G, N, 2]) converts with `formats.from_transform_int4`.

`int4_weight_only_matmul` picks the path ("gemv" for M <= 8, else "tiled") and, on the GEMV
path, the kernel a config names (KERNEL):

* "rows", "words": batch 1 over 32-bit words of the packed bytes (`int4_rows`);
* "bytes", "mma": any batch up to 16 over the packed bytes (`int4_bytes`);
* "tc": batch 1..8 on tensor cores over pre-shuffled words (`int4_tc`);
* the tiled path (`tiled`) over the packed bytes or, with TC_WORDS, the tensor-core words.

`int4_words_matmul` serves a layer that keeps its weight only as the tensor-core words.
Numerics: every accumulation is fp32, the output cast to x's dtype once; the GEMVs never round
the weight, the tiled kernel rounds it to x's dtype before the dot (like `int4_reference_matmul`
in `transforms.quantize`). BLOCK_K divides G (the row and tensor-core kernels may take several
groups a step); K % G == 0.

Parts here: the host wrappers, the quantiser and PyTorch reference, the configuration space and
default across the kernels, and the KernelSpecs "int4_gemv" and "int4_tiled" (their shape buckets
key the tuning cache).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from agnitra.kernels.pdl import pdl_trigger_refinements
from agnitra.kernels.quant.common import (
    _SMS, _bucket, _cdiv, _check_activations, _check_int4_block_k, _check_split_k_steps, _decode_inputs, _elt, _flops, _groups_a_step,
    _output_and_path, _positive_int, _positive_pow2, _ref_dtype,
)
from agnitra.kernels.quant.formats import int4_dequantize, pack_int4, quantize_int4_codes
from agnitra.kernels.quant.int4_bytes import _int4_bytes_gemv, _int4_bytes_space
from agnitra.kernels.quant.int4_rows import _int4_batch1_gemv, _int4_rows_space
from agnitra.kernels.quant.int4_tc import _int4_tc_gemv, _int4_tc_scales, _int4_tc_space, _int4_tc_words, _tc_held_shapes, int4_tc_default_config
from agnitra.kernels.quant.tiled import _check_words_step, _int4_tiled, int4_tiled_configs, int4_tiled_default_config
from agnitra.kernels.spec import KernelSpec, register_kernel


# ============================================================================================
# Part 1: host wrappers
# ============================================================================================


def _check_int4_gemv_config(cfg: dict[str, Any], group_size: int, k: int) -> str:
    """An int4 GEMV config's blocks, kernel, step against the groups and split against K; its KERNEL."""
    kernel = cfg.get("KERNEL", "bytes")
    if kernel not in ("rows", "words", "bytes", "mma", "tc"):
        raise ValueError(f"int4 GEMV KERNEL must be 'rows', 'words', 'bytes', 'mma' or 'tc', got {kernel!r}")
    _positive_pow2(cfg, "BLOCK_N", "BLOCK_K", *(() if kernel == "tc" else ("SPLIT_K",)))
    if kernel == "tc":  # any split: K = 14336 is 112 steps of 128, 8 a program in 14 splits
        _positive_int(cfg, "SPLIT_K")
    _check_int4_block_k(cfg["BLOCK_K"], group_size, "gemv", spans_k=k if kernel in ("rows", "tc") else None)
    if kernel in ("rows", "words", "tc"):
        _check_split_k_steps(cfg, k, kernel)
    return kernel


def _check_int4_inputs(x, w_packed, scales, zeros, group_size) -> tuple[int, int, int]:
    _check_activations(x)
    if w_packed.dim() != 2 or w_packed.dtype != torch.uint8:
        raise ValueError(f"w_packed must be a 2-D uint8 tensor [N, K/2] (two int4 codes per byte), got {tuple(w_packed.shape)} {w_packed.dtype}")
    m, k = x.shape
    n = w_packed.shape[0]
    if 2 * w_packed.shape[1] != k:
        raise ValueError(f"x has K={k} features but w_packed is {tuple(w_packed.shape)} (expected [N, {k // 2}] for K={k}: two codes per byte)")
    if not isinstance(group_size, int) or group_size < 2 or group_size % 2:
        raise ValueError(f"group_size must be a positive even integer, got {group_size!r}")
    if k % group_size:
        raise ValueError(f"K={k} is not a multiple of group_size={group_size}")
    if n == 0 or k == 0:
        raise ValueError(f"empty problem: N={n}, K={k}")
    if w_packed.device != x.device:
        raise ValueError(f"w_packed is on {w_packed.device}, x on {x.device}")
    _check_scales_and_zeros(x, scales, zeros, n, group_size)
    return m, n, k


def _check_scales_and_zeros(x: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, n: int, group_size: int) -> None:
    k = x.shape[1]
    for name, t in (("scales", scales), ("zeros", zeros)):
        if tuple(t.shape) != (n, k // group_size):
            raise ValueError(f"{name} must be [N, K/group_size] = [{n}, {k // group_size}], got {tuple(t.shape)}")
        if not t.is_floating_point() or t.device != x.device:
            raise ValueError(f"{name} must be a floating-point tensor on {x.device}, got {t.dtype} on {t.device}")


def int4_weight_only_matmul(
    x: torch.Tensor,
    w_packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    config: dict[str, Any] | None = None,
    out: torch.Tensor | None = None,
    tc_operands: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """y [M, N] = x [M, K] @ W'^T (+ bias), W'[n, k] = (q[n, k] - 8) * scales[n, k // G] + zeros[n, k // G].

    `w_packed` [N, K/2] uint8, low nibble = even k (`pack_int4`); scales, zeros [N, K/G].
    `config` as for `int8_weight_only_matmul`; BLOCK_K must divide group_size (ValueError), or for
    the batch-1 row kernel be a multiple of it that divides K. `tc_operands`: `int4_tc_operands`
    of these weights for KERNEL 'tc' (in x's dtype; made and cached on the tensors when absent).
    """
    m, n, k = _check_int4_inputs(x, w_packed, scales, zeros, group_size)
    y, path = _output_and_path(x, n, bias, out, config)
    if path is None:
        return y
    shape = (m, n, k, group_size)
    if path == "gemv":
        cfg = {**int4_gemv_default_config(shape, x.dtype), **(config or {})}
        kernel = _check_int4_gemv_config(cfg, group_size, k)
        if kernel in ("rows", "words"):
            _int4_batch1_gemv(kernel, x, w_packed, scales, zeros, group_size, bias, y, cfg)
            return y
        if kernel == "tc":
            _int4_tc_gemv(x, n, group_size, bias, y, cfg, tc_operands or (_int4_tc_words(w_packed), _int4_tc_scales(scales, zeros, x.dtype)))
            return y
        _int4_bytes_gemv(kernel, x, w_packed, scales, zeros, group_size, bias, y, cfg)
        return y
        return y
    cfg = {**int4_tiled_default_config(shape, x.dtype), **(config or {})}
    if config and "BLOCK_K" in config and "TC_WORDS" not in config:  # a step chosen for the packed bytes: the default's words do not apply
        cfg.pop("TC_WORDS", None)
    _int4_tiled(x, _tiled_weight(w_packed, cfg, tc_operands), n, scales, zeros, group_size, bias, y, cfg)
    return y


def int4_words_matmul(
    x: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    config: dict[str, Any] | None = None,
    tc_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """`int4_weight_only_matmul` for a weight kept only as the tensor-core words (`shuffle_int4_for_tc`,
    N = scales' rows): path "gemv" is the tensor-core GEMV (KERNEL 'tc'; M <= 8, 16-bit x, `tc_scales`
    = `int4_tc_operands`' pairs in x's dtype), path "tiled" the tiled kernel over the words (TC_WORDS;
    any M and float dtype). The row, word and byte GEMVs read the packed bytes: not here."""
    _check_activations(x)
    m, k = x.shape
    n = scales.shape[0]
    if words.dim() != 4 or tuple(words.shape) != (_cdiv(n, 16), k // 64, 32, 4) or words.dtype != torch.int32 or k % 64:
        raise ValueError(f"words must be int32 [cdiv(N, 16), K/64, 32, 4] = [{_cdiv(n, 16)}, {k // 64}, 32, 4] for x's K={k} (a multiple of 64)"
                         f" and N={n} rows of scales, got {tuple(words.shape)} {words.dtype}")
    if k % group_size or group_size % 64:
        raise ValueError(f"the words hold whole 64-feature chunks: group_size must be a multiple of 64 dividing K={k}, got {group_size}")
    _check_scales_and_zeros(x, scales, zeros, n, group_size)
    y, path = _output_and_path(x, n, bias, None, config)
    if path is None:
        return y
    shape = (m, n, k, group_size)
    if path == "gemv":
        cfg = {**int4_tc_default_config(n, k, group_size), **(config or {})}
        if cfg.get("KERNEL") != "tc" or tc_scales is None:
            raise ValueError(f"a weight kept as tensor-core words runs the GEMV KERNEL='tc' with its (s, z) pairs (tc_scales); got KERNEL={cfg.get('KERNEL')!r},"
                             f" tc_scales {'given' if tc_scales is not None else 'missing'}: use path 'tiled'")
        _check_int4_gemv_config(cfg, group_size, k)
        _int4_tc_gemv(x, n, group_size, bias, y, cfg, (words, tc_scales))
        return y
    cfg = {**int4_tiled_default_config(shape, x.dtype), **(config or {}), "TC_WORDS": True}
    _check_words_step(cfg)
    _int4_tiled(x, words, n, scales, zeros, group_size, bias, y, cfg)
    return y


def _tiled_weight(w_packed: torch.Tensor, cfg: dict[str, Any], tc_operands) -> torch.Tensor:
    """The tiled kernel's weight: the packed bytes, or with config TC_WORDS the tensor-core GEMV's
    words (`tc_operands`' first, made and cached on `w_packed` when absent), read as W^T tiles
    of whole 16-row tiles and 64-feature chunks."""
    if not cfg.get("TC_WORDS"):
        return w_packed
    _check_words_step(cfg)
    return tc_operands[0] if tc_operands is not None else _int4_tc_words(w_packed)


# ============================================================================================
# Part 2: quantiser and PyTorch reference
# ============================================================================================


def quantize_int4_groupwise(w: torch.Tensor, group_size: int, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W [N, K] -> (packed [N, K/2] uint8, scales [N, K/G], zeros [N, K/G] in `dtype`, default W's):
    the int4 format's codes (`formats.quantize_int4_codes`, tinygemm's form, as the int4 transform
    quantises), packed low first for these kernels."""
    if group_size < 2 or group_size % 2:
        raise ValueError(f"group_size must be a positive even integer, got {group_size}")
    codes, scales, zeros = quantize_int4_codes(w, group_size, dtype)  # [N, K] uint8, [N, K/G] twice
    return pack_int4(codes), scales, zeros


def int4_reference(x: torch.Tensor, w_packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W'^T + bias with W' = int4_dequantize(...) in float64 (x float64) or float32; x's dtype out."""
    dt = _ref_dtype(x)
    y = x.to(dt) @ int4_dequantize(w_packed, scales, zeros, group_size, dt).t()  # [M, N]
    if bias is not None:
        y = y + bias.to(dt)
    return y.to(x.dtype)


# ============================================================================================
# Part 3: configuration space and KernelSpecs
# ============================================================================================


def _int4_gemv_space(m: int, n: int, k: int, group: int) -> list[dict[str, Any]]:
    """Batch 1: the row and word kernels (`int4_rows`); M > 1: the byte and MMA kernels over bytes
    (`int4_bytes`); M <= 8 with 16-bit activations: the tensor-core kernel over pre-shuffled
    weights too (`int4_tc`; the default at batch 1 from 1024 outputs)."""
    own = _int4_rows_space(n, k, group) if m == 1 and k % 8 == 0 else _int4_bytes_space(m, n, k, group)
    return own + _int4_tc_space(m, n, k, group)


def int4_gemv_configs(shape: tuple[int, ...], dtype: torch.dtype) -> list[dict[str, Any]]:
    m, n, k, g = shape[:4]
    configs = _int4_gemv_space(m, n, k, g)
    return [c for c in configs if c["KERNEL"] not in ("mma", "tc") or dtype != torch.float32]


def int4_gemv_default_config(shape: tuple[int, ...], dtype: torch.dtype, tensor_cores: bool = True) -> dict[str, Any]:
    """M == 1 (the H100's best at llama shapes, docs/kernels.md): rows of 2048 codes, up to 2048 of them, in one step (1 row on eight warps under 1024 outputs, else
    8 rows through cp.async); under 1024 outputs, 2 rows x a whole row of up to 2048 codes a step on four warps; otherwise, for
    16-bit activations and unless `tensor_cores` is False (no pre-shuffled operands at hand), the
    tensor-core kernel (`int4_tc_default_config`); else the row kernel with two groups a step and all of
    the next step's reads prefetched, 64 rows a program when those alone fill the device (four
    warps), else 32 rows, split along K while the programs stay under ~4 an SM (two warps); the word
    kernel for fewer than 64 rows. M > 1: the byte kernel."""
    m, n, k, g = shape[:4]
    if m == 1 and k % 8 == 0 and g % 16 == 0:
        bk = max(b for b in (16, 32, 64, 128, 256) if g % b == 0)
        if n < 64:
            blocks, split = _cdiv(n, 16), 1
            while split < 8 and blocks * split * 2 <= 8 * _SMS and k // bk >= 4 * split:
                split *= 2
            return {"KERNEL": "words", "BLOCK_N": 16, "BLOCK_K": min(bk, 128), "SPLIT_K": split, "num_warps": 4, "num_stages": 1}
        whole = [b for b in (2048, 1024) if _groups_a_step(b, g, k) > 1]
        if whole and whole[0] == k == 2048 and n <= 2048:  # the whole row one step
            if n < 1024:  # a row a program on eight warps
                return {"KERNEL": "rows", "BLOCK_N": 1, "BLOCK_K": k, "SPLIT_K": 1, "num_warps": 8, "num_stages": 1, "VEC": 2, "PREFETCH": 1}
            # eight rows a program through cp.async (faster than the tensor-core kernel here)
            return {"KERNEL": "rows", "BLOCK_N": 8, "BLOCK_K": k, "SPLIT_K": 1, "num_warps": 4, "num_stages": 1, "VEC": 4, "PREFETCH": 0, "STAGES": 3}
        if n < 1024 and whole:  # few outputs: many programs of short rows, one or two steps each
            return {"KERNEL": "rows", "BLOCK_N": 2, "BLOCK_K": whole[0], "SPLIT_K": 1, "num_warps": 4, "num_stages": 1, "VEC": 4, "PREFETCH": 1}
        if tensor_cores and dtype in (torch.float16, torch.bfloat16) and k % 64 == 0 and g % 64 == 0:
            return int4_tc_default_config(n, k, g)
        if bk == g and 2 * g <= 256 and _groups_a_step(2 * g, g, k) == 2:
            bk *= 2  # two groups a step
        bn = 64 if _cdiv(n, 64) >= _SMS else 32
        blocks, split = _cdiv(n, bn), 1
        while split < 4 and blocks * split * 2 <= 4 * _SMS and k // bk >= 4 * split:
            split *= 2
        return {"KERNEL": "rows", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4 if bn == 64 and split == 1 else 2,
                "num_stages": 1, "VEC": 2, "PREFETCH": 2}
    bk = max(b for b in (2, 4, 8, 16, 32, 64, 128) if g % b == 0)  # the largest divisor of G up to 128
    bn = 32 if m <= 2 else 16
    blocks = _cdiv(n, bn)
    split = 1
    while blocks * split * 2 <= 2 * _SMS and _cdiv(k, bk) >= 4 * split:
        split *= 2
    return {"KERNEL": "bytes", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4, "num_stages": 3}


def _make_int4_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
    m, n, k, g = shape[:4]
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen, device="cpu") / k**0.5
    packed, scales, zeros = quantize_int4_groupwise(w, g, dtype)
    x = torch.randn(m, k, generator=gen, device="cpu").to(dtype)
    bias = (torch.randn(n, generator=gen, device="cpu") * 0.1).to(dtype)
    return x.to(device), packed.to(device), scales.to(device), zeros.to(device), g, bias.to(device)


def _int4_bytes(shape: tuple[int, ...], dtype: torch.dtype, bias: bool = True) -> float:
    m, n, k, g = shape[:4]
    e = _elt(dtype)
    return float(n * k // 2 + 2 * n * (k // g) * e + bias * n * e + m * k * e + m * n * e)  # weight, scales + zeros, bias, x, y


def _int4_gemv_bucket(shape: tuple[int, ...]) -> str:
    """int4 GEMV: "v15" where the tensor-core kernel's held configs (`_tc_held_shapes`) are in the space,
    "v14" elsewhere (since the refinements hold the waiting fix-up, FIXUP "wait"). A tuning made for
    an older space keys another bucket and is not reused; what each version added: git history."""
    m, n, k = shape[:3]
    held = len(shape) > 3 and bool(_tc_held_shapes(m, n, k, shape[3]))
    return _bucket(shape) + ("_v15" if held else "_v14")


def _int4_tiled_bucket(shape: tuple[int, ...]) -> str:
    """int4 tiled: "v2" since tiles over the tensor-core words (TC_WORDS) joined the space."""
    return _bucket(shape) + "_v2"


def _int4_refinements(config: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    """The int4 GEMV's refinements (`KernelSpec.refinements`): `pdl_trigger_refinements` for the
    kernels that launch with PDL (rows, tc); for the tensor-core kernel with its prefetch on the GPU,
    also x read in the step that uses it over steps of at least 256 features with the register cap at
    128 (X_NOW: the registers x held a step ahead carry twice the words instead; faster at some
    shapes, slower at others). For a split tensor-core config on the GPU, also it and its trigger
    variant with the one-round-trip fix-up of a cooperative grid (FIXUP "wait"; a grid too large to
    be resident at once fails and is skipped). A variant that cannot run at the shape fails its check
    and is skipped. What each gained on the H100: docs/kernels.md."""
    out = pdl_trigger_refinements(config, device) if config.get("KERNEL") in ("rows", "tc") else []
    if config.get("KERNEL") == "tc" and config.get("SPLIT_K", 1) > 1 and config.get("FIXUP", "count") == "count" and device.type == "cuda":
        out += [{**c, "FIXUP": "wait"} for c in (config, *out)]
    if config.get("KERNEL") == "tc" and config.get("PREFETCH") and not config.get("X_NOW") and device.type == "cuda":
        out.append({**config, "X_NOW": True, "BLOCK_K": max(256, config["BLOCK_K"]), "maxnreg": 128})
    return out


def _int4_launch(path: str):
    def launch(x, w_packed, scales, zeros, group_size, bias=None, config: dict[str, Any] | None = None):
        return int4_weight_only_matmul(x, w_packed, scales, zeros, group_size, bias, config={**(config or {}), "path": path})

    launch.__name__ = f"int4_weight_only_matmul_{path}"
    return launch


for _path, _configs, _default in (("gemv", int4_gemv_configs, int4_gemv_default_config), ("tiled", int4_tiled_configs, int4_tiled_default_config)):
    register_kernel(
        KernelSpec(
            name=f"int4_{_path}",
            configs=_configs,
            default_config=_default,
            launch=_int4_launch(_path),
            reference=int4_reference,
            make_inputs=_decode_inputs(_make_int4_inputs) if _path == "gemv" else _make_int4_inputs,
            flops=_flops,
            bytes=functools.partial(_int4_bytes, bias=False) if _path == "gemv" else _int4_bytes,
            bucket=_int4_gemv_bucket if _path == "gemv" else _int4_tiled_bucket,
            refinements=_int4_refinements if _path == "gemv" else None,
        )
    )

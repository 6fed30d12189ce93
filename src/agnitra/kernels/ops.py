"""Agnitra's kernels as PyTorch custom operators, with their tuned configurations.

Registered through `torch.library.custom_op`, so `torch.compile` treats each launch as one opaque
operator (with a fake implementation for shapes) and CUDA graphs capture the Triton launches
like any other kernel. The configuration of each launch comes from the per-device tuning cache
(loaded once per process) for the problem's shape bucket, else the kernel's default.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from agnitra.kernels.spec import get_kernel
from agnitra.kernels.tuning_cache import cache_key


@functools.lru_cache(maxsize=4)
def _tuned_entries(device_type: str) -> dict[str, Any]:
    """The tuning cache of this device, read once per process (empty when there is none)."""
    try:
        from agnitra.config import load_settings
        from agnitra.kernels.tuning_cache import TuningCache
        from agnitra.telemetry.signature import device_signature, signature_id

        signature = signature_id(device_signature(torch.device(device_type)))
        return TuningCache(load_settings().cache_path, signature).entries()
    except Exception:  # noqa: BLE001 - no cache, no ceilings yet: defaults are fine
        return {}


@functools.lru_cache(maxsize=4096)
def config_for(kernel: str, shape: tuple[int, ...], dtype: torch.dtype, device_type: str) -> dict[str, Any]:
    spec = get_kernel(kernel)
    hit = _tuned_entries(device_type).get(cache_key(kernel, spec.bucket(shape), dtype))
    return dict(hit["config"]) if hit else spec.default_config(shape, dtype)


def _gemv_or_tiled(prefix: str, m: int) -> str:
    return f"{prefix}_gemv" if m <= 8 else f"{prefix}_tiled"


@torch.library.custom_op("agnitra::int8_weight_only_linear", mutates_args=())
def int8_weight_only_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from agnitra.kernels.quant.int8 import int8_weight_only_matmul

    m, n, k = x.shape[0], weight.shape[0], weight.shape[1]
    kernel = _gemv_or_tiled("int8", m)
    config = {**config_for(kernel, (m, n, k), x.dtype, x.device.type), "path": kernel.split("_")[1]}
    return int8_weight_only_matmul(x, weight, scales, bias, config=config)


@int8_weight_only_linear.register_fake
def _(x, weight, scales, bias):
    return x.new_empty(x.shape[0], weight.shape[0])


@torch.library.custom_op("agnitra::int4_weight_only_linear", mutates_args=())
def int4_weight_only_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int, bias: torch.Tensor | None,
                            tc_words: torch.Tensor | None = None, tc_scales: torch.Tensor | None = None) -> torch.Tensor:
    """`tc_words`, `tc_scales`: the module's `int4_tc_operands` (in x's dtype). Without them the
    tensor-core GEMV gives way to the row kernel, and the tiled kernel reads the packed bytes instead
    of the words (TC_WORDS): making them here could happen inside a CUDA graph capture, whose pool
    refuses allocations that outlive the step."""
    from agnitra.kernels.quant.int4 import int4_gemv_default_config, int4_weight_only_matmul

    m, n, k = x.shape[0], weight.shape[0], weight.shape[1] * 2
    kernel = _gemv_or_tiled("int4", m)
    shape = (m, n, k, group_size)
    config = {**config_for(kernel, shape, x.dtype, x.device.type), "path": kernel.split("_")[1]}
    operands = (tc_words, tc_scales) if tc_words is not None and tc_scales is not None else None
    if config.get("KERNEL") == "tc" and operands is None:
        config = {**int4_gemv_default_config(shape, x.dtype, tensor_cores=False), "path": "gemv"}
    if config.get("TC_WORDS") and tc_words is None:  # the tiled kernel over the packed bytes instead, same tiles
        config = {key: value for key, value in config.items() if key != "TC_WORDS"}
    return int4_weight_only_matmul(x, weight, scales, zeros, group_size, bias, config=config, tc_operands=operands)


@int4_weight_only_linear.register_fake
def _(x, weight, scales, zeros, group_size, bias, tc_words=None, tc_scales=None):
    return x.new_empty(x.shape[0], weight.shape[0])


@torch.library.custom_op("agnitra::int4_words_linear", mutates_args=())
def int4_words_linear(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int, bias: torch.Tensor | None,
                      tc_scales: torch.Tensor | None = None) -> torch.Tensor:
    """int4 weights kept only as the tensor-core words: for M <= 8 with `tc_scales` (the (s, z) pairs
    in x's dtype) the tensor-core GEMV, with the tuned GEMV config where it is that kernel, else its
    default; otherwise the tiled kernel over the words, with the tuned tiled config where it reads
    the words, else the tiled default (which does)."""
    from agnitra.kernels.quant.int4 import int4_words_matmul
    from agnitra.kernels.quant.int4_tc import int4_tc_default_config
    from agnitra.kernels.quant.tiled import int4_tiled_default_config

    m, n, k = x.shape[0], scales.shape[0], x.shape[1]
    shape = (m, n, k, group_size)
    if m <= 8 and tc_scales is not None:
        config = config_for("int4_gemv", shape, x.dtype, x.device.type)
        config = {**(config if config.get("KERNEL") == "tc" else int4_tc_default_config(n, k, group_size)), "path": "gemv"}
    else:
        config = config_for("int4_tiled", shape, x.dtype, x.device.type)
        config = {**(config if config.get("TC_WORDS") else int4_tiled_default_config(shape, x.dtype)), "path": "tiled"}
    return int4_words_matmul(x, words, scales, zeros, group_size, bias, config=config, tc_scales=tc_scales)


@int4_words_linear.register_fake
def _(x, words, scales, zeros, group_size, bias, tc_scales=None):
    return x.new_empty(x.shape[0], scales.shape[0])


def _rows(x: torch.Tensor) -> tuple[int, int]:
    return x.numel() // x.shape[-1], x.shape[-1]


@torch.library.custom_op("agnitra::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    from agnitra.kernels import norms

    return norms.rms_norm(x, weight, eps, config=config_for("rms_norm", _rows(x), x.dtype, x.device.type))


@rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("agnitra::add_rms_norm", mutates_args=())
def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual), x + residual) in one pass over memory."""
    from agnitra.kernels import norms

    return norms.rms_norm(x, weight, eps, residual=residual, config=config_for("rms_norm_residual", _rows(x), x.dtype, x.device.type))


@add_rms_norm.register_fake
def _(x, residual, weight, eps):
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("agnitra::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    from agnitra.kernels import norms

    return norms.layer_norm(x, weight, bias, eps, config=config_for("layer_norm", _rows(x), x.dtype, x.device.type))


@layer_norm.register_fake
def _(x, weight, bias, eps):
    return torch.empty_like(x)


@torch.library.custom_op("agnitra::linear_gelu", mutates_args=())
def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """gelu(x @ weight^T + bias) (exact GELU) for x [M, K], weight [N, K]: one matmul-template launch."""
    from agnitra.kernels.matmul import config_for_tensors, matmul

    shape = (x.shape[0], weight.shape[0], x.shape[1])
    config = config_for_tensors(config_for("matmul_bias_gelu", shape, x.dtype, x.device.type), shape, x, weight, x.dtype)
    return matmul(x, weight, bias, "gelu", config=config, b_transposed=True)


@linear_gelu.register_fake
def _(x, weight, bias):
    return x.new_empty(x.shape[0], weight.shape[0])


@torch.library.custom_op("agnitra::gated_activation", mutates_args=())
def gated_activation(a: torch.Tensor, b: torch.Tensor, activation: str) -> torch.Tensor:
    from agnitra.kernels import gated_mlp

    kernel = "silu_mul" if activation == "silu" else "gelu_mul"
    return gated_mlp.gated_activation(a, b, activation=activation, config=config_for(kernel, _rows(a), a.dtype, a.device.type))


@gated_activation.register_fake
def _(a, b, activation):
    return torch.empty_like(a)


@torch.library.custom_op("agnitra::gated_activation_packed", mutates_args=())
def gated_activation_packed(ab: torch.Tensor, activation: str) -> torch.Tensor:
    """act(gate) * up for ab [..., 2H] = the output of a fused w1|w3 projection, read in place."""
    from agnitra.kernels import gated_mlp

    kernel = "silu_mul" if activation == "silu" else "gelu_mul"
    rows, width = _rows(ab)
    return gated_mlp.gated_activation_packed(ab, activation=activation, config=config_for(kernel, (rows, width // 2), ab.dtype, ab.device.type))


@gated_activation_packed.register_fake
def _(ab, activation):
    return ab.new_empty(*ab.shape[:-1], ab.shape[-1] // 2)


# --- the decode-step kernels of `kernels.decode_layer` (one token a sequence, batch <= 8) ---


def _gemv_config(kernel: str, x: torch.Tensor, outputs: int) -> dict[str, Any]:
    return config_for(kernel, (x.shape[0], outputs, x.shape[1]), x.dtype, x.device.type)


@torch.library.custom_op("agnitra::decode_norm_gemv", mutates_args=())
def decode_norm_gemv(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, gain: torch.Tensor | None, eps: float, residual: torch.Tensor | None) -> torch.Tensor:
    """(RMSNorm(x) * gain, or x) @ W^T * scales (+ residual): [M, K] -> [M, N]."""
    from agnitra.kernels import decode_layer

    return decode_layer.norm_gemv(x, weight, scales, gain, eps, residual, config=_gemv_config("decode_gemv", x, weight.shape[0]))


@decode_norm_gemv.register_fake
def _(x, weight, scales, gain, eps, residual):
    return x.new_empty(x.shape[0], weight.shape[0])


@torch.library.custom_op("agnitra::decode_gated_norm_gemv", mutates_args=())
def decode_gated_norm_gemv(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, gain: torch.Tensor | None, eps: float) -> torch.Tensor:
    """silu(gate) * up over the stacked W1|W3 rows: [M, K] -> [M, N/2]."""
    from agnitra.kernels import decode_layer

    return decode_layer.gated_norm_gemv(x, weight, scales, gain, eps, config=_gemv_config("decode_gemv_gated", x, weight.shape[0] // 2))


@decode_gated_norm_gemv.register_fake
def _(x, weight, scales, gain, eps):
    return x.new_empty(x.shape[0], weight.shape[0] // 2)


@torch.library.custom_op("agnitra::decode_qkv_rope_cache", mutates_args=("k_cache", "v_cache"))
def decode_qkv_rope_cache(
    x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, gain: torch.Tensor, eps: float,
    cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, n_heads: int,
) -> torch.Tensor:
    """q of RMSNorm(x) @ Wqkv^T, rotated; k (rotated) and v written into the caches at input_pos."""
    from agnitra.kernels import decode_layer

    config = _gemv_config("decode_gemv", x, weight.shape[0] // 2)
    return decode_layer.qkv_rope_cache(x, weight, scales, gain, eps, cos, sin, input_pos, k_cache, v_cache, n_heads, config=config)


@decode_qkv_rope_cache.register_fake
def _(x, weight, scales, gain, eps, cos, sin, input_pos, k_cache, v_cache, n_heads):
    return x.new_empty(x.shape[0], n_heads * k_cache.shape[-1])


@torch.library.custom_op("agnitra::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, input_pos: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Each query head over its kv head's cache slots 0..input_pos: [M, H*D] -> [M, H*D]."""
    from agnitra.kernels import decode_layer

    _, n_kv, slots, d = k_cache.shape
    config = config_for("decode_attention", (q.shape[0], n_heads, d, n_kv, slots), q.dtype, q.device.type)
    return decode_layer.decode_attention(q, k_cache, v_cache, input_pos, n_heads, config=config)


@decode_attention.register_fake
def _(q, k_cache, v_cache, input_pos, n_heads):
    return torch.empty_like(q)

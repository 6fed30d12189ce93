"""Host-side pieces the weight-only matmul kernels share: argument and config checks, block and
split heuristics' constants, the shape buckets the tuning cache keys by, inline PTX or the
interpreter's arithmetic (`_ptx`)."""

from __future__ import annotations

from typing import Any

import torch

from agnitra.kernels.spec import pow2_bucket, triton_available

GEMV_MAX_M = 8  # the wrapper's automatic choice: GEMV for M <= 8, tiled above
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_SMS = 132  # H100 SXM: the split-K heuristics aim for a few programs per SM
_MAX_ACC_PER_THREAD = 128  # GEMV: fp32 products per thread per step ([BM, BN, BK] / threads)


def _block_m(m: int) -> int:
    """GEMV rows per program: the power of two at or above M, at most GEMV_MAX_M."""
    return min(pow2_bucket(max(m, 1)), GEMV_MAX_M)


def _dot_precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"  # 16-bit operands ignore it


def _check_device(x: torch.Tensor) -> None:
    ok, why = triton_available(x.device)
    if not ok:
        raise RuntimeError(why)


def _check_activations(x: torch.Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"x must be fp16, bf16 or fp32, got {x.dtype}")


def _check_vector(name: str, t: torch.Tensor | None, n: int, device: torch.device) -> None:
    if t is None:
        return
    if tuple(t.shape) != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one per output channel), got {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, x on {device}")


def _check_out(out: torch.Tensor | None, m: int, n: int, x: torch.Tensor) -> torch.Tensor:
    if out is None:
        return torch.empty((m, n), device=x.device, dtype=x.dtype)
    if tuple(out.shape) != (m, n) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"out must be [{m}, {n}] {x.dtype} on {x.device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    return out


def _output_and_path(x: torch.Tensor, n: int, bias: torch.Tensor | None, out: torch.Tensor | None, config: dict[str, Any] | None) -> tuple[torch.Tensor, str | None]:
    """A weight-only matmul's output [M, N] and path, after the checks they share (bias, out, a
    device the kernels run on); path None when M == 0 (nothing to launch)."""
    m = x.shape[0]
    _check_vector("bias", bias, n, x.device)
    y = _check_out(out, m, n, x)
    if m == 0:
        return y, None
    _check_device(x)
    return y, _choose_path(config, m)


def _choose_path(config: dict[str, Any] | None, m: int) -> str:
    path = (config or {}).get("path") or ("gemv" if m <= GEMV_MAX_M else "tiled")
    if path not in ("gemv", "tiled"):
        raise ValueError(f"config path must be 'gemv' or 'tiled', got {path!r}")
    return path


def _launch_options(cfg: dict[str, Any]) -> dict[str, int]:
    options = {"num_warps": int(cfg.get("num_warps", 4)), "num_stages": int(cfg.get("num_stages", 2))}
    if cfg.get("maxnreg"):  # ptxas's register cap (occupancy against spills)
        options["maxnreg"] = int(cfg["maxnreg"])
    return options


def _stages(cfg: dict[str, Any]) -> int:
    """A GEMV loop's software-pipeline depth (config key STAGES, default 1: loads straight to registers).

    Triton pipelines a loop without tl.dot only when the loop itself asks (`tl.range(num_stages=...)`);
    the launch option num_stages alone leaves such loops as they are."""
    stages = cfg.get("STAGES", 1)
    if not isinstance(stages, int) or not 1 <= stages <= 8:
        raise ValueError(f"config STAGES must be an integer from 1 to 8, got {stages!r}")
    return stages


def _positive_pow2(cfg: dict[str, Any], *keys: str) -> None:
    for key in keys:
        v = cfg[key]
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise ValueError(f"config {key} must be a positive power of two, got {v!r}")


def _positive_int(cfg: dict[str, Any], key: str) -> None:
    v = cfg[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"config {key} must be a positive integer, got {v!r}")


def _check_split_k_steps(cfg: dict[str, Any], k: int, kernel: str) -> None:
    """Every split has a step: the prefetching int4 GEMVs read a program's first step before their
    loop, which a split with no step would read past the end of x and the weight."""
    steps = _cdiv(k, cfg["BLOCK_K"])
    if cfg["SPLIT_K"] > steps:
        raise ValueError(f"int4 GEMV KERNEL='{kernel}': SPLIT_K={cfg['SPLIT_K']} is more than the {steps} step(s) of BLOCK_K={cfg['BLOCK_K']}"
                         f" in K={k}; use SPLIT_K <= {steps} or a smaller BLOCK_K")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _ptx(asm: str) -> str:
    """Inline PTX for a kernel, or "" under the interpreter, which cannot run PTX (the kernels then
    take their arithmetic path)."""
    from agnitra.kernels.spec import interpreting

    return "" if interpreting() else asm


def _groups_a_step(block_k: int, group_size: int, k: int) -> int:
    """Groups a loop step of BLOCK_K features spans: 1 when BLOCK_K divides the group, BLOCK_K / G
    when it is a multiple of G that divides K (the row kernel's long steps), 0 otherwise."""
    if group_size % block_k == 0:
        return 1
    return block_k // group_size if block_k % group_size == 0 and k % block_k == 0 else 0


def _check_int4_block_k(block_k: int, group_size: int, path: str, spans_k: int | None = None) -> None:
    """BLOCK_K divides the group (one scale/zero per chunk) or, given `spans_k` (the row kernel's K),
    is a multiple of it dividing K (a scale/zero per group of the step)."""
    least = 32 if path == "tiled" else 2
    groups = _groups_a_step(block_k, group_size, spans_k) if spans_k else int(group_size % block_k == 0)
    if block_k < least or not groups:
        several = f" or a multiple of it dividing K={spans_k}" if spans_k else ""
        raise ValueError(
            f"int4 {path} path: BLOCK_K={block_k} must divide group_size={group_size} (one scale/zero per chunk){several}"
            f" and be at least {least}; pick BLOCK_K in {[b for b in (2, 4, 8, 16, 32, 64, 128, 256, 512) if b >= least and group_size % b == 0]}"
        )


def _split_ks(n_blocks: int, steps: int) -> list[int]:
    """SPLIT_K values worth trying: 1, and splits that keep at most ~8 programs an SM and 2+ steps each."""
    return [s for s in (1, 2, 4, 8) if s == 1 or (n_blocks * s <= 8 * _SMS and steps >= 2 * s)]


def _ref_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _decode_inputs(make):
    """`make`'s inputs without the bias: the decode GEMVs are tuned and benchmarked at llama's
    projections, which have none (nor do the peers they are timed against). Tests pass their own."""
    def inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> tuple:
        return (*make(shape, dtype, device, seed)[:-1], None)

    return inputs


def _elt(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _flops(shape: tuple[int, ...]) -> float:
    m, n, k = shape[:3]
    return 2.0 * m * n * k


def _bucket(shape: tuple[int, ...]) -> str:
    m, n, k = shape[:3]
    tail = f"_G{shape[3]}" if len(shape) > 3 else ""
    return f"M{pow2_bucket(m)}_N{n}_K{k}{tail}"


def _with_path(fn, path: str):
    def launch(*inputs, config: dict[str, Any] | None = None):
        return fn(*inputs, config={**(config or {}), "path": path})

    launch.__name__ = f"{fn.__name__}_{path}"
    return launch

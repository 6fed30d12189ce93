"""Weight-only quantised matmuls in Triton: int8 per output row, int4 per group of input features.

y [M, N] = x [M, K] @ W'^T (+ bias [N]), W' the dequantised weight. At decode (M = 1..8) these are
the GEMVs of Llama-style models: torch.compile cannot fuse through the quantised formats, and at
batch 1 the time is the time to read the weight bytes once. Above M = 8 (prefill) a tiled GEMM runs.

One module per part, each with its own docstring:

* `formats`: the formats and their quantisers and int4 packings (torch only; `transforms.quantize`
  uses them too);
* `int8`: `int8_weight_only_matmul`, the int8 GEMV kernel, KernelSpecs "int8_gemv", "int8_tiled";
* `int4`: `int4_weight_only_matmul`, `int4_words_matmul`, the int4 configuration space,
  KernelSpecs "int4_gemv", "int4_tiled"; its GEMV kernels are in `int4_rows` (batch 1 over 32-bit
  words), `int4_bytes` (over the packed bytes, batch up to 16) and `int4_tc` (tensor cores, batch
  1..8, pre-shuffled weights);
* `tiled`: the tiled int8 and int4 GEMMs;
* `split_k`: the in-kernel split-K fix-up and the ends every GEMV shares, and their device buffers;
* `common`: host checks and heuristics' constants the kernels share.

Every accumulation is fp32 and the output is cast to x's dtype once; shapes need not be multiples of
the blocks. The kernels are plain functions jitted at their first launch (`_triton.jit_kernel`), so
TRITON_INTERPRET=1 (the CPU tests) may be set after import.

Importing this package imports none of them: `kernels.registry` imports `int8` and `int4`, which
register the KernelSpecs. How the kernels are tuned and what was measured: docs/kernels.md.
"""

"""The instruction mix of a batch-1 GEMV kernel's main loop (int4 rows, words, tc; int8), compiled for sm_90 (no GPU needed).

    PYTHONPATH=src python tests/sass_loop.py --kernel rows --block-n 256 --block-k 128 --warps 4
    PYTHONPATH=src python tests/sass_loop.py --kernel words --block-n 64 --block-k 128 --warps 4 --json out.json
    PYTHONPATH=src python tests/sass_loop.py --kernel tc --block-n 128 --warps 4 --asm-layout
    PYTHONPATH=src python tests/sass_loop.py --kernel int8 --block-n 8 --block-k 2048 --warps 8 --k 2048 [--no-prmt]
    PYTHONPATH=src python tests/sass_loop.py --kernel tiled --block-m 64 --block-n 128 --block-k 128 --warps 4 --stages 2
    PYTHONPATH=src python tests/sass_loop.py --each '{"a": ["--kernel", "rows"], "b": ["--kernel", "int8", "--k", "2048"]}'

Compiles the kernel for CUDA arch 90 with the installed Triton (`triton.compile` on an ASTSource,
pointer arguments declared 16-byte aligned, unit strides constant, as the launcher specialises
them), disassembles the cubin with the nvdisasm that ships with Triton, finds the longest loop
(the span of the farthest backward branch) and counts its instructions by opcode. Prints
instructions per step and per int4 code: at batch 1 the GEMV is issue-bound long before it is
bandwidth-bound, so this count is the kernel's cost model. Barriers and shared-memory traffic in
the loop (layout conversions) are listed separately. `--each` runs several argument lists in one
process (its imports, ~6 s of CPU, paid once) and prints each one's output by name, as JSON.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

from agnitra.kernels import pdl
from agnitra.kernels._triton import jit_kernel
from agnitra.kernels.quant import int4_rows, int4_tc, int8, tiled

_ADDRESS = re.compile(r"/\*([0-9a-f]{4,})\*/")
_BRANCH = re.compile(r"BRA `?\(?\.?(L_x_\d+)")


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def compile_kernel(fn, types: dict[str, str], constants: dict, num_warps: int, maxnreg: int | None = None, num_stages: int = 1,
                   divisible: tuple[str, ...] = ()):
    """`fn` (a kernel of agnitra.kernels.quant) compiled for sm_90: pointers and the `divisible` integers declared
    multiples of 16 (as the launcher specialises them); `types` names every runtime argument's type."""
    import inspect

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    parameters = inspect.signature(fn).parameters
    constants = {**{n: p.default for n, p in parameters.items() if p.default is not inspect.Parameter.empty}, **constants}  # e.g. PDL off
    names = list(parameters)
    signature = {name: "constexpr" if name in constants else types[name] for name in names}
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names if signature[n].startswith("*") or n in divisible}
    source = ASTSource(fn=jit_kernel(fn), signature=signature, constexprs=constants, attrs=aligned)
    options = {"num_warps": num_warps, "num_stages": num_stages, **({"maxnreg": maxnreg} if maxnreg else {})}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def asm_layouts(ttgir: str) -> list[str]:
    """The layouts of the inline-asm ops' results in a kernel's TTGIR (`#blocked<{...}>` text)."""
    layouts = dict(re.findall(r"^(#\w+) = (#ttg\.\w+<.*>)$", ttgir, flags=re.M))
    uses = [re.search(r"-> tensor<[^,]+, (#\w+)>", line) for line in ttgir.splitlines() if "elementwise_inline_asm" in line]
    return [layouts.get(use.group(1), use.group(1)) for use in uses if use]


def compile_sass(fn, types: dict[str, str], constants: dict, num_warps: int, maxnreg: int | None = None, num_stages: int = 1,
                 divisible: tuple[str, ...] = ()) -> tuple[str, int]:
    """(SASS, registers a thread) of `fn` compiled for sm_90 (`compile_kernel`)."""
    import tempfile

    kernel = compile_kernel(fn, types, constants, num_warps, maxnreg, num_stages, divisible)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([_tool("nvdisasm"), "-c", "-gi", cubin.name], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", cubin.name], capture_output=True, text=True).stdout
    registers = re.search(r"REG:(\d+)", usage)
    return sass, int(registers.group(1)) if registers else -1


def spill_count(sass: str) -> int:
    """Local-memory loads and stores (LDL, STL) in a kernel's SASS: registers spilled."""
    return sum(1 for line in sass.splitlines() if _ADDRESS.search(line) and re.search(r"\b(LDL|STL)\b", line))


_PREDICATE = r"(@!?U?P\w+\s+)?"


def opcode(instruction: str) -> str:
    """An instruction's opcode without its modifiers or predicate ("@P0 LDG.E.EF.128 R2, ..." -> "LDG")."""
    return re.sub(r"^" + _PREDICATE, "", instruction).split()[0].split(".")[0]


def loop_body(sass: str) -> list[str]:
    """The instructions of the longest loop, in order (predicate, opcode and operands, no address): from a
    label to the farthest branch back to it."""
    lines = [line for line in sass.splitlines() if _ADDRESS.search(line)]
    address = {i: int(_ADDRESS.search(line).group(1), 16) for i, line in enumerate(lines)}
    best = None
    for i, line in enumerate(lines):
        match = _BRANCH.search(line)
        if not match:
            continue
        pos = sass.find(f".{match.group(1)}:")
        if pos < 0:
            continue
        first = next(x for x in sass[pos:].splitlines()[1:] if _ADDRESS.search(x))
        start, end = int(_ADDRESS.search(first).group(1), 16), address[i]
        if start < end and (best is None or end - start > best[1] - best[0]):
            best = (start, end)
    if best is None:
        return []
    instruction = lambda line: re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line).split(" ;")[0].strip()
    return [instruction(line) for i, line in enumerate(lines) if best[0] <= address[i] <= best[1]]


def pdl_order(sass: str) -> dict:
    """Under PDL, what a kernel does before `griddepcontrol.wait` (SASS ACQBULK): the global loads
    issued before it (these must not read anything the previous kernel writes), how many waits,
    and where launch_dependents (PREEXIT) is: before the wait, or how many instructions after it."""
    ops = [re.sub(r"^\s*/\*[0-9a-f]+\*/\s*(@!?U?P\w+\s+)?", "", line).split(" ;")[0] for line in sass.splitlines() if _ADDRESS.search(line)]
    waits = [i for i, op in enumerate(ops) if op.startswith("ACQBULK")]
    first = waits[0] if waits else len(ops)
    triggers = [i for i, op in enumerate(ops) if op.startswith("PREEXIT")]
    return {"waits": len(waits), "loads_before_wait": [op.split()[0] for op in ops[:first] if op.startswith("LDG")], "triggers": len(triggers),
            "trigger_after_wait": triggers[0] - first if triggers and triggers[0] > first else None}


def load_placement(body: list[str]) -> dict:
    """Where the loop's global loads sit against its arithmetic (HMMA, else FFMA): a prefetch works
    only if the next step's loads are issued before this step's arithmetic, not sunk below it."""
    loads = [i for i, op in enumerate(body) if op in ("LDG", "LDGSTS")]
    math = [i for i, op in enumerate(body) if op == "HMMA"] or [i for i, op in enumerate(body) if op == "FFMA"]
    return {"loads": [loads[0], loads[-1]] if loads else None, "math": [math[0], math[-1]] if math else None,
            "loads_ahead_of_math": bool(loads and math and loads[-1] < math[0])}


def weight_load_placement(body: list[str]) -> list[int]:
    """Where the loop's evict-first loads (the weights: read once) sit, by position in the loop (`loop_body`)."""
    return [i for i, line in enumerate(body) if re.match(_PREDICATE + r"LDG\.E\.EF", line)]


def _tc_call(args) -> tuple:
    """The tensor-core GEMV (`_int4_gemv_tc_kernel`): BLOCK_N / 16 tiles, 64 features a step."""
    half = {"bf16": "*bf16", "fp16": "*fp16"}[args.dtype]
    types = {"x_ptr": "*i32", "w_ptr": "*i32", "sz_ptr": "*i32", "b_ptr": half, "y_ptr": half, "p_ptr": "*fp32", "c_ptr": "*i32",
             "M": "i32", "stride_xm": "i32", "stride_ym": "i32"}
    consts = {"N": args.n, "K": args.k, "stride_yn": 1, "GROUP_SIZE": args.group, "HAS_BIAS": True, **int4_tc.tc_constants(args.dtype),
              "TILES": args.block_n // 16, "WARPS": args.warps, "CHUNKS": args.block_k // 64, "PREFETCH": bool(args.prefetch), "SPLIT_K": args.split_k, "STAGES": args.stages,
              **({"X_NOW": True} if args.prefetch == 3 else {}), "FLIP": int4_tc.tc_flip() if args.flip is None else args.flip == "on",
              **({"WARP_K": True, "CHUNKS": args.block_k // (64 * args.warps)} if args.warp_k else {})}  # WARP_K: --block-k is the program's step
    if args.as_launched:  # as a tuned one-warp winner runs at llama shapes: no bias, next kernel let in at the wait, waiting fix-up
        consts.update(HAS_BIAS=False, PDL=pdl.PDL_TRIGGERS["wait"], FIXUP_WAIT=args.split_k > 1)
    return int4_tc._int4_gemv_tc_kernel, types, consts, args.block_n * args.block_k // (32 * args.warps)


def _int8_call(args) -> tuple:
    """The int8 GEMV at batch 1 (`_int8_gemv_kernel`, N x K and the strides compiled in)."""
    act = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32"}[args.dtype]
    types = {"x_ptr": act, "w_ptr": "*i8", "s_ptr": act, "b_ptr": act, "y_ptr": act, "p_ptr": "*fp32", "c_ptr": "*i32"}
    consts = {"M": 1, "stride_xk": 1, "stride_wk": 1, "stride_yn": 1, "HAS_BIAS": False, "EVEN_K": args.k % args.block_k == 0, "BLOCK_M": 1,
              "BLOCK_N": args.block_n, "BLOCK_K": args.block_k, "SPLIT_K": args.split_k, "STAGES": args.stages,
              "CVT_ASM": "" if args.no_prmt else int8.INT8_TO_F32_ASM}
    shape = {"N": args.n, "K": args.k, "stride_xm": args.k, "stride_wn": args.k, "stride_ym": args.n}
    return int8._int8_gemv_kernel, types, {**consts, **shape}, args.block_n * args.block_k // (32 * args.warps)


def _tiled_call(args) -> tuple:
    """The tiled int4 kernel (batch > 8) reading the tensor-core words (`_int4_tiled_kernel`, TC_WORDS): BLOCK_M x BLOCK_N tiles."""
    act = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32"}[args.dtype]
    types = {"x_ptr": act, "w_ptr": "*i32", "s_ptr": act, "z_ptr": act, "b_ptr": act, "y_ptr": act, "M": "i32", "N": "i32", "K": "i32",
             "stride_xm": "i32", "stride_wn": "i32", "stride_sn": "i32", "stride_zn": "i32", "stride_ym": "i32"}
    consts = {"stride_xk": 1, "stride_wk": 1, "stride_sg": 1, "stride_zg": 1, "stride_yn": 1, "GROUP_SIZE": args.group, "HAS_BIAS": False,
              "DOT_PRECISION": "ieee", "BLOCK_M": args.block_m, "BLOCK_N": args.block_n, "BLOCK_K": args.block_k, "GROUP_M": 8, "TC_WORDS": True}
    return tiled._int4_tiled_kernel, types, consts, args.block_n * args.block_k // (32 * args.warps)


def _kernel_call(args) -> tuple:
    """(kernel, argument types, constexprs, codes per thread per loop step)."""
    if args.kernel == "tc":
        return _tc_call(args)
    if args.kernel == "tiled":
        return _tiled_call(args)
    if args.kernel == "int8":
        return _int8_call(args)
    block_w = args.block_k // 8
    act = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32"}[args.dtype]
    common = {"x_ptr": act, "w_ptr": "*i32", "s_ptr": act, "z_ptr": act, "b_ptr": act, "y_ptr": act, "p_ptr": "*fp32", "c_ptr": "*i32",
              "N": "i32", "K": "i32", "stride_sn": "i32", "stride_zn": "i32"}
    consts = {"stride_xk": 1, "stride_sg": 1, "stride_zg": 1, "stride_yn": 1, "GROUP_SIZE": args.group, "HAS_BIAS": True,
              "BLOCK_N": args.block_n, "BLOCK_W": block_w, "SPLIT_K": args.split_k}
    codes = args.block_n * args.block_k // (32 * args.warps)
    if args.kernel == "rows":
        common = {key: value for key, value in common.items() if key not in ("K", "stride_sn", "stride_zn")}  # compiled in
        consts = {**consts, "K": args.k, "stride_sn": args.k // args.group, "stride_zn": args.k // args.group}
        rows = {"STRIDE_W": args.k // 8, "PRECISE": args.dtype == "fp32", "VEC": args.vec, "PREFETCH": args.prefetch, "STAGES": args.stages}
        return int4_rows._int4_gemv_rows_kernel, common, {**consts, **rows}, codes
    return int4_rows._int4_gemv_words_kernel, {**common, "stride_wn": "i32"}, {**consts, "PREFETCH": args.prefetch, "STAGES": args.stages}, codes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", choices=("rows", "words", "tc", "int8", "tiled"), default="rows")
    parser.add_argument("--block-m", type=int, default=64, help="tiled: BLOCK_M")
    parser.add_argument("--block-n", type=int, default=256)
    parser.add_argument("--block-k", type=int, default=128)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--split-k", type=int, default=1)
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--k", type=int, default=4096, help="K (the row kernel compiles its row stride in)")
    parser.add_argument("--n", type=int, default=32000, help="int8, tc: N (compiled in)")
    parser.add_argument("--no-prmt", action="store_true", help="int8: int8 -> fp32 by the integer-add trick instead of the prmt PTX")
    parser.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    parser.add_argument("--vec", type=int, default=2, help="rows kernel: words a lane loads from each row at once")
    parser.add_argument("--prefetch", type=int, default=0, help="1: load the next step's words before this step's arithmetic; 2: its x, scales and zeros too")
    parser.add_argument("--stages", type=int, default=1, help="STAGES and num_stages (Triton streams the loop's loads through shared memory when > 1)")
    parser.add_argument("--maxnreg", type=int, help="cap the registers a thread (ptxas .maxnreg)")
    parser.add_argument("--flip", choices=("on", "off"), help="tc: FLIP, its loads with dims 0 and 2 swapped (default: as Agnitra picks for the installed Triton)")
    parser.add_argument("--as-launched", action="store_true", help="tc: compile as the tuned one-warp winners launch (no bias, PDL at the wait, FIXUP wait when split)")
    parser.add_argument("--warp-k", action="store_true", help="tc: the warps split each step's features (WARP_K); --block-k is the program's step")
    parser.add_argument("--json", help="append the result as a JSON line to this file")
    parser.add_argument("--asm-layout", action="store_true", help="print the layout of each inline-asm op (TTGIR) and stop")
    parser.add_argument("--pdl-order", action="store_true", help="compile with PDL; print the global loads before the grid-dependency wait and stop")
    parser.add_argument("--pdl-trigger", choices=sorted(pdl.PDL_TRIGGERS), default=pdl.DEFAULT_PDL_TRIGGER, help="with --pdl-order: where the next kernel is let in")
    args = parser.parse_args(argv)
    fn, types, consts, codes = _kernel_call(args)
    divisible = {"tc": ("stride_xm",), "int8": ()}.get(args.kernel, ())
    if args.asm_layout:
        for layout in asm_layouts(compile_kernel(fn, types, consts, args.warps, args.maxnreg, args.stages, divisible).asm["ttgir"]):
            print("asm layout:", layout)
        return 0
    if args.pdl_order:
        sass, registers = compile_sass(fn, types, {**consts, "PDL": pdl.PDL_TRIGGERS[args.pdl_trigger]}, args.warps, args.maxnreg, args.stages, divisible)
        kernel_total = len([line for line in sass.splitlines() if _ADDRESS.search(line)])
        print(json.dumps({**pdl_order(sass), "registers": registers, "spills": spill_count(sass), "kernel_instructions": kernel_total}))
        return 0
    sass, registers = compile_sass(fn, types, consts, args.warps, args.maxnreg, args.stages, divisible)
    instructions = loop_body(sass)
    body = [opcode(line) for line in instructions]
    mix = collections.Counter(body)
    total = len(body)
    import triton

    kernel_total = len([line for line in sass.splitlines() if _ADDRESS.search(line)])
    spills = spill_count(sass)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or None  # the kernels' source
    result = {"kernel": args.kernel, "config": vars(args), "commit": commit, "triton": triton.__version__, "loop_instructions": total, "kernel_instructions": kernel_total,
              "codes_per_thread_step": codes, "registers": registers, "spills": spills, "placement": load_placement(body), "per_code": round(total / codes, 3) if codes else None,
              "weight_loads_at": weight_load_placement(instructions),
              "barriers": mix.get("BAR", 0), "shared": mix.get("LDS", 0) + mix.get("STS", 0), "mix": dict(mix.most_common())}
    print(f"{args.kernel} BLOCK_N={args.block_n} BLOCK_K={args.block_k} warps={args.warps} split={args.split_k} vec={args.vec}"
          f" prefetch={args.prefetch} stages={args.stages} maxnreg={args.maxnreg} {args.dtype}: {registers} registers,"
          f" {total} instructions a step ({kernel_total} in the kernel, {spills} spill loads/stores), {result['per_code']} a code; barriers {result['barriers']}, shared {result['shared']};"
          f" loads {result['placement']['loads']} (weights at {result['weight_loads_at']}) math {result['placement']['math']}; {mix.most_common(8)}")
    if args.json:
        with open(args.json, "a") as out:
            out.write(json.dumps(result) + "\n")
    return 0


def each(cases: dict[str, list[str]]) -> dict[str, str]:
    """`main` over each named argument list in this process: what each one printed, by name."""
    printed = {}
    for name, argv in cases.items():
        with contextlib.redirect_stdout(io.StringIO()) as out:
            main(argv)
        printed[name] = out.getvalue()
    return printed


if __name__ == "__main__":
    if sys.argv[1:2] == ["--each"]:
        print(json.dumps(each(json.loads(sys.argv[2]))))
        sys.exit(0)
    sys.exit(main())

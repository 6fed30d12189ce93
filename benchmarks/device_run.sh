#!/usr/bin/env bash
# Runs on the GPU machine (torch 2.11, no registry): PYTHONPATH=src, results under $OUT.
#   bash benchmarks/device_run.sh profile      # device ceilings, profile of the llama-1b decode step
#   bash benchmarks/device_run.sh llama1b      # llama-1b decode peers
#   bash benchmarks/device_run.sh llama8b|bert|resnet|others   # the other peer cases
#   bash benchmarks/device_run.sh inspect|kernels|e2e|fused|decode|retune|prefetch|decode8b|optimize1b|resnet64|bert1|trust|trust1b   # inspect, kernel tests and benchmark, decode recipes, optimize
#   bash benchmarks/device_run.sh gemv|gemvfair [1b|8b]|pdl [shapes]|pdltrig|pdle2e|pdle2e8|pdle2e8off|pdlkernels SHAPES TAG [COMPILES [--retune]]|abevict|abint8|abint8b|retune8|pdlnorms|abint8c|refine KERNEL SHAPES TAG|tcclamp|wahead|xnow|refinecached KERNEL SHAPES TAG|e2es14|xnow2|refinedecode|decodeonestep|abdecode|decodee2e TAG|xnow512|readfloor|tpefix|overlap|fixup|relaxed|warpk|warpkheld|warpkheld2|waitdebug [wait|wait_bounded]|waitcost|rawpair|parts|narrow [SHAPES]|narrowwait [SHAPES]|retune13 [SHAPES TAG]|retune14 [SHAPES TAG [tests|notests]]|waitab|narrows16 [SHAPES]|record8b|fused8b|nextpf [SHAPES [STEPS [CHAIN]]]|splits14|splits14b|xnowreg|smemdiag|l2ahead|l2chain|chainrank|heldfloor [SIZES]|heldgemv [SIZES]|heldtail|held|heldnarrow|warpksmall|warpksmall2|peerinf [SHAPES]|peerdrift [SHAPES]|parts13|atomicfix|cluster|clusterx [SHAPES]|clustersmall|stagess1|arrive|int4rows|lowreg [SHAPES TAG]|pipeearly|pipeearly8|early [SHAPES]|earlyab [SHAPES]|earlyab2|prewait|prewaitloop|explore|rows|maxnreg|stages|stages2|access|groups|groups8b|prefetch2|prefetch2-1b|ends|tc|tcstages|tcsplits|tcreg|tcreg1b|tcdecomp|stages8|rowsshort|rowswarps|rowsstages|inductor8|e2e8|e2e4peers|ncu|ncutc|ncusrc   # decode GEMVs
#   bash benchmarks/device_run.sh tma [gemv]|rounds   # the persistent TMA matmul beside cuBLAS [and the GEMV rows, peers head to head]: tuned rows with peers, explorations, hardware counters
set -u
if [ -d .whl ]; then  # optuna, plotly: not in the device image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
fi
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1 AGNITRA_CACHE_DIR=/tmp/agnitra-cache HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/agnitra-cache
# the tuning cache and ceilings of an earlier machine of the same kind (carry .devcache): no re-tuning
[ -d .devcache ] && cp -r .devcache/. /tmp/agnitra-cache/
save_cache() { mkdir -p "$OUT/devcache"; for d in tuning ceilings; do mkdir -p "$OUT/devcache/$d"; cp /tmp/agnitra-cache/$d/*.json "$OUT/devcache/$d/" 2>/dev/null; done; }
trap save_cache EXIT
# merged into the committed result file of the day, copied to $OUT after each case group
RESULT=benchmarks/results/peers-nvidia-h100-80gb-hbm3-$(date +%F).json
peers() { timeout "$1" python3 benchmarks/peers.py --preset h100 --cases "$2" --out-file "$RESULT"; cp "$RESULT" "$OUT/"; }
# ncu_gemv N K OUTFILE CONFIG...: hardware counters of batch-1 int4 GEMV configs (JSON) and tinygemm at N x K
ncu_gemv() {
  local n=$1 k=$2 file=$3; shift 3
  local configs=(); for c in "$@"; do configs+=(--config "$c"); done
  timeout 400 ncu --clock-control none -k regex:'int4_gemv|tinygemm' \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    python3 benchmarks/gemv_once.py --n "$n" --k "$k" "${configs[@]}" --launches 1 > "$file" 2>&1
  tail -5 "$file"
}
# tc_warp_k BLOCK_N BLOCK_K WARPS SPLIT [PREFETCH [X_NOW [MAXNREG [FIXUP [PDL]]]]]: an int4 tc GEMV config with WARP_K (JSON, for ab_config/chain_ab variants)
tc_warp_k() {
  local extra=""; [ -n "${8:-}" ] && extra+=", \"FIXUP\": \"$8\""; [ -n "${9:-}" ] && extra+=", \"PDL\": $9"
  echo "{\"WARP_K\": true, \"BLOCK_N\": $1, \"BLOCK_K\": $2, \"num_warps\": $3, \"SPLIT_K\": $4, \"PREFETCH\": ${5:-true}, \"X_NOW\": ${6:-false}, \"maxnreg\": ${7:-0}$extra}"
}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  case "${1:?phase}" in
    profile)
      python3 -m agnitra.cli device --device cuda --json > "$OUT/device.json"
      timeout 150 python3 -m agnitra.cli profile zoo:llama-1b --device cuda --runs 30 --json > "$OUT/profile-llama-1b.json"
      ;;
    llama1b) peers 570 llama-1b-decode ;;
    llama8b) peers 260 llama-8b-decode ;;
    bert) peers 300 bert-base-b1,bert-base-b32 ;;
    resnet) peers 300 resnet50-b1,resnet50-b64 ;;
    short) peers 200 llama-8b-decode-short; peers 190 resnet50-short-b1,resnet50-short-b64 ;;
    others) peers 280 mamba-b1,whisper-tiny-b1 ;;
    kernels)  # bf16 numerics of the compiled kernels, tune-matmul, the kernel benchmark (tunes llama shapes)
      AGNITRA_GPU_TESTS=1 timeout 120 python3 -m pytest -q -p no:cacheprovider --timeout 100 -m gpu tests/test_kernels_quant.py tests/test_kernels_matmul.py 2>&1 | tail -15
      timeout 100 python3 -m agnitra.cli tune-matmul --dim 4096 --runs 20 --dtype bf16 --device cuda
      timeout 290 python3 benchmarks/kernels.py --shapes 1b,8b --max-trials 12 --runs 50; cp benchmarks/results/kernels-*.json "$OUT/"
      AGNITRA_GPU_TESTS=1 timeout 75 python3 -m pytest -q -p no:cacheprovider --timeout 60 -m "not gpu" --maxfail 8 tests/test_kernels_quant.py tests/test_kernels_norms.py tests/test_kernels_matmul.py 2>&1 | tail -30
      ;;
    e2e)  # kernel tests on the GPU (parallel), the kernel benchmark, llama-1b decode with and without the kernels
      AGNITRA_GPU_TESTS=1 timeout 110 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 100 tests/test_kernels_quant.py tests/test_kernels_norms.py tests/test_kernels_matmul.py 2>&1 | tail -25
      timeout 200 python3 benchmarks/kernels.py --shapes 1b,8b --max-trials 10 --runs 30; cp benchmarks/results/kernels-*.json "$OUT/"
      ro="compile(mode=reduce-overhead)"
      timeout 250 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --json > "$OUT/bench-llama-1b.json"
      ;;
    fused)  # llama-1b decode: bf16 compile vs int8 through Inductor vs int8 through Agnitra's kernels (stacked q|k|v, w1|w3)
      ro="compile(mode=reduce-overhead)"
      timeout 420 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --recipe "int8-weight-only + $ro" --recipe "triton-kernels(weights=int8,fuse=false,decode=false) + $ro" --json > "$OUT/bench-llama-1b-fused.json"
      ;;
    optimize1b)  # agnitra optimize on llama-1b decode within one command (512 teacher-forced positions verified)
      AGNITRA_GPU_TESTS=1 timeout 45 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 40 tests/test_kernels_decode.py 2>&1 | tail -8
      timeout 530 python3 benchmarks/optimize.py --preset h100 --cases llama-1b-decode-short; cp benchmarks/results/optimize-nvidia-*.json "$OUT/"
      cp runs/optimize-llama-1b-decode-short/candidates.jsonl "$OUT/" 2>/dev/null
      ;;
    decode)  # the fused decode-step kernels: GPU numerics, tuning at llama-1b shapes, llama-1b decode end to end
      AGNITRA_GPU_TESTS=1 timeout 90 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 80 tests/test_kernels_decode.py 2>&1 | tail -15
      timeout 150 python3 benchmarks/kernels.py --only decode --shapes 1b --max-trials 12 --runs 30 --out-file "$OUT/kernels-decode.json"
      ro="compile(mode=reduce-overhead)"
      timeout 300 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --recipe "int8-weight-only + $ro" --json > "$OUT/bench-llama-1b-decode.json"
      ;;
    retune)  # the decode kernels re-tuned at llama-1b and -8b shapes, llama-1b decode end to end
      timeout 300 python3 benchmarks/kernels.py --only decode --shapes 1b,8b --max-trials 12 --runs 30 --out-file "$OUT/kernels-decode.json"
      ro="compile(mode=reduce-overhead)"
      timeout 250 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --json > "$OUT/bench-llama-1b-decode.json"
      ;;
    prefetch)  # the decode GEMVs re-tuned with prefetching in their space, llama-1b decode end to end
      timeout 330 python3 benchmarks/kernels.py --only decode --shapes 1b,8b --max-trials 50 --runs 30 --out-file "$OUT/kernels-decode.json"
      ro="compile(mode=reduce-overhead)"
      timeout 200 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --json > "$OUT/bench-llama-1b-decode.json"
      ;;
    decode8b)  # llama-8b: bf16 compile vs the fused int8 decode (kernels tuned by the retune phase)
      ro="compile(mode=reduce-overhead)"
      timeout 380 python3 -m agnitra.cli bench zoo:llama-8b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --recipe "int8-weight-only + $ro" --json > "$OUT/bench-llama-8b-decode.json"
      ;;
    trust|trust1b)  # issue 36 on the GPU: the trust tests (worker, budgets, verification, cuda-graphs per shape), then optimize within its budget
      python3 -c "import scipy, typer, click, transformers, cloudpickle; print('scipy', scipy.__version__, 'typer', typer.__version__, 'click', click.__version__, 'transformers', transformers.__version__)"
      if [ -n "${TRUST_TESTS:-}" ]; then  # e.g. TRUST_TESTS="not onnxruntime_on_bert"
        AGNITRA_GPU_TESTS=1 timeout 240 python3 -m pytest -q -p no:cacheprovider --timeout 200 -k "$TRUST_TESTS" tests/test_transforms_runtime.py tests/test_verification_verifies.py tests/test_run_safety.py tests/test_model_untouched.py > "$OUT/pytest-trust.txt" 2>&1; tail -25 "$OUT/pytest-trust.txt"
      fi
      case_id=${TRUST_CASE:-$([ "$1" = trust ] && echo bert-base-b1-short || echo llama-1b-decode-short)}
      timeout "${TRUST_LIMIT:-330}" python3 benchmarks/optimize.py --preset h100 --cases "$case_id"; cp benchmarks/results/optimize-nvidia-*.json "$OUT/"
      cp "runs/optimize-$case_id/candidates.jsonl" "runs/optimize-$case_id/agnitra.log" "$OUT/" 2>/dev/null
      ;;
    resnet64|bert1)  # agnitra optimize on resnet50 batch 64 / bert-base batch 1 within one command
      case_id=$([ "$1" = resnet64 ] && echo resnet50-b64-short || echo bert-base-b1-short)
      timeout 560 python3 benchmarks/optimize.py --preset h100 --cases "$case_id"; cp benchmarks/results/optimize-nvidia-*.json "$OUT/"
      cp "runs/optimize-$case_id/candidates.jsonl" "$OUT/" 2>/dev/null
      ;;
    encoders)  # bert-base b1 and resnet50 b64: compile modes vs freezing vs cuDNN-fused conv epilogues
      ro="compile(mode=reduce-overhead)"; rof="compile(mode=reduce-overhead,freezing=true)"
      timeout 150 python3 -m agnitra.cli bench zoo:bert-base --device cuda --dtype fp16 --batch 1 --seq-len 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "$rof" --json > "$OUT/bench-bert-b1.json"
      timeout 230 python3 -m agnitra.cli bench zoo:resnet50 --device cuda --dtype fp16 --batch 64 --no-ops --variants eager \
        --recipe "channels-last + $ro" --recipe "conv-fusion + channels-last + $ro" --recipe "channels-last + $rof" --recipe "conv-fusion + channels-last + cuda-graphs" --json > "$OUT/bench-resnet-b64.json"
      ;;
    bert2)  # bert-base b1: stacked q|k|v and the Linear+GELU kernel against both compile peers
      timeout 150 python3 benchmarks/kernels.py --only encoder --max-trials 60 --runs 30 --out-file "$OUT/kernels-encoder.json"
      ro="compile(mode=reduce-overhead)"
      timeout 360 python3 -m agnitra.cli bench zoo:bert-base --device cuda --dtype fp16 --batch 1 --seq-len 128 --no-ops --variants eager,compile-reduce-overhead,compile-max-autotune \
        --recipe "fuse-projections + $ro" --recipe "triton-kernels(weights=keep,norms=false,decode=false) + $ro" --json > "$OUT/bench-bert-b1.json"
      ;;
    resnetmax)  # resnet50 b64: the optimize answer beside compile max-autotune (minutes of conv tuning) in one run
      timeout 570 python3 -m agnitra.cli bench zoo:resnet50 --device cuda --dtype fp16 --batch 64 --no-ops --variants eager,compile-reduce-overhead,compile-max-autotune \
        --recipe "conv-fusion + channels-last + compile(mode=max-autotune)" --recipe "channels-last + compile(mode=max-autotune)" --json > "$OUT/bench-resnet50-b64-max-autotune.json"
      ;;
    kernels5)  # matmul with unmasked K loads, re-tuned over its whole space; decode GEMVs beside torch.compile's int8 in one run
      AGNITRA_GPU_TESTS=1 timeout 80 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 70 tests/test_kernels_matmul.py 2>&1 | tail -4
      timeout 200 python3 -m agnitra.cli tune-matmul --dim 4096 --runs 10 --dtype bf16 --max-trials 80 --device cuda | tail -25
      timeout 60 python3 benchmarks/kernels.py --only matmul --runs 50 --out-file "$OUT/kernels-matmul.json"
      timeout 190 python3 benchmarks/kernels.py --only decode --shapes 1b,8b --max-trials 50 --runs 30 --out-file "$OUT/kernels-decode-peers.json"
      ;;
    explore)  # decode GEMVs: read floors, the tensor-core int4 GEMV's whole space, int8 over a wide space, peers
      timeout 300 python3 benchmarks/explore_gemv.py --shapes 8b --only floor,int4 --runs 20 --out-file "$OUT/gemv-explore-int4-8b.json" 2>&1 | grep -v "^  "
      timeout 200 python3 benchmarks/explore_gemv.py --shapes 8b --only int8 --runs 20 --out-file "$OUT/gemv-explore-int8-8b.json" 2>&1 | grep -v "^  "
      timeout 60 python3 benchmarks/explore_gemv.py --shapes 1b --only int4 --runs 20 --out-file "$OUT/gemv-explore-int4-1b.json" 2>&1 | grep -v "^  "
      ;;
    gemv)  # weight-only GEMVs: GPU numerics of every quant kernel, then the GEMV rows (whole spaces tuned) with read floors and peers
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 140 tests/test_kernels_quant.py 2>&1 | tail -4
      timeout 440 python3 benchmarks/kernels.py --only gemv --shapes 8b,1b --max-trials 100 --runs 30 --out-file "$OUT/kernels-gemv.json" 2>&1 | grep -v "^  "
      ;;
    gemvfair)  # GPU quant and decode-layer numerics; the GEMV rows from the cached tunings, bias-free as the peers, torch.compile's int8 compiled 3 times afresh (its best kept)
      AGNITRA_GPU_TESTS=1 timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 160 tests/test_kernels_quant.py tests/test_kernels_decode.py 2>&1 | tail -4
      timeout 400 python3 benchmarks/kernels.py --only gemv --shapes "${2:-1b}" --max-trials 100 --runs 30 --peer-compiles 3 --out-file "$OUT/kernels-gemv-fair-${2:-1b}.json" 2>&1 | grep -v "^  "
      ;;
    pdl)  # GEMVs launched with programmatic dependent launch: GPU numerics (the graph-captured chain test), then the GEMV rows with and without PDL beside torch.compile's int8 with and without Inductor's PDL
      AGNITRA_GPU_TESTS=1 timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 160 tests/test_kernels_quant.py 2>&1 | tail -4
      timeout 400 python3 benchmarks/kernels.py --only gemv --shapes "${2:-1b,4096x4096}" --max-trials 100 --runs 30 --out-file "$OUT/kernels-gemv-pdl.json" 2>&1 | grep -v "^  "
      ;;
    pdltrig)  # the graph-captured GEMV chain test on the GPU (verbose), then the GEMVs without PDL and by trigger point, in chains of themselves and with a torch kernel between calls
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "chain" 2>&1 | grep -v "^  " | tail -60
      timeout 300 python3 benchmarks/pdl_trigger.py --mixed --out-file "$OUT/pdl-trigger.json"
      ;;
    pdle2e)  # llama-1b decode end to end, int4 through Agnitra's GEMVs under compile + CUDA graphs: PDL off everywhere, then on in our GEMVs and Inductor's kernels
      ro="compile(mode=reduce-overhead)"
      for pdl in 0 1; do
        AGNITRA_PDL=$pdl TORCHINDUCTOR_ENABLE_PDL=$pdl timeout 285 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops \
          --variants eager --recipe "$ro" --recipe "triton-kernels(weights=int4,decode=false) + $ro" --json > "$OUT/bench-llama-1b-int4-pdl$pdl.json"
        tail -c 400 "$OUT/bench-llama-1b-int4-pdl$pdl.json"; echo
      done
      ;;
    pdle2e8)  # GPU numerics of the PDL chain and the decode-layer kernels; llama-1b decode end to end, int8 through the fused decode layer, PDL on (ours and Inductor's) beside bf16 compile with and without Inductor's PDL
      AGNITRA_GPU_TESTS=1 timeout 140 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 130 tests/test_kernels_decode.py tests/test_kernels_quant.py -k "chain or decode" 2>&1 | tail -4
      ro="compile(mode=reduce-overhead)"
      timeout 330 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "compile(mode=reduce-overhead,pdl=false)" --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --json > "$OUT/bench-llama-1b-int8-pdl1.json"
      tail -c 300 "$OUT/bench-llama-1b-int8-pdl1.json"
      ;;
    pdle2e8off)  # the same without PDL anywhere (AGNITRA_PDL=0, compile(pdl=false))
      AGNITRA_PDL=0 timeout 330 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "compile(mode=reduce-overhead,pdl=false)" --recipe "triton-kernels(weights=int8) + compile(mode=reduce-overhead,pdl=false)" --json > "$OUT/bench-llama-1b-int8-pdl0.json"
      tail -c 300 "$OUT/bench-llama-1b-int8-pdl0.json"
      ;;
    pdlkernels)  # the GEMV rows at the given shapes, PDL on (ours and the second compile peer's), without PDL too, torch.compile's int8 with and without Inductor's PDL each compiled twice afresh
      timeout 560 python3 benchmarks/kernels.py --only gemv --shapes "$2" --max-trials 100 --runs 30 --peer-compiles "${4:-2}" ${5:-} --out-file "$OUT/kernels-gemv-pdl-$3.json" 2>&1 | grep -v "^  "
      ;;
    abevict)  # the int8 GEMV's tuned configs with weights read evict-first and x evict-last (EVICT), head to head, llama-1b and -8b shapes
      timeout 300 python3 benchmarks/ab_config.py --kernel int8_gemv --variant '{"EVICT": true}' --out-file "$OUT/ab-int8-evict.json"
      ;;
    abint8)  # the int8 GEMV at llama-1b shapes: its tuned configs against whole-row steps (Inductor's 16 x 2048 on 8 warps) straight to registers or through shared memory, and the trigger after the wait
      timeout 300 python3 benchmarks/ab_config.py --kernel int8_gemv --shapes 32000x2048,5632x2048,2048x2048,256x2048 --variant '{"STAGES": 1}' \
        --variant '{"BLOCK_N": 16, "BLOCK_K": 2048, "num_warps": 8, "STAGES": 1}' --variant '{"BLOCK_N": 16, "BLOCK_K": 2048, "num_warps": 8, "STAGES": 3}' \
        --variant '{"BLOCK_N": 8, "BLOCK_K": 2048, "num_warps": 4, "STAGES": 1}' --variant '{"BLOCK_N": 32, "BLOCK_K": 2048, "num_warps": 8, "STAGES": 1}' \
        --variant '{"PDL": "wait"}' --out-file "$OUT/ab-int8-whole-rows.json"
      ;;
    abint8b)  # the int8 GEMV summing one-step programs at once (no accumulator tile): whole-row configs against the tuned ones, then the llama-1b rows retuned (one-step configs straight to registers in the space) beside the compile peers
      timeout 200 python3 benchmarks/ab_config.py --kernel int8_gemv --shapes 32000x2048,5632x2048,2048x2048,256x2048 \
        --variant '{"BLOCK_N": 16, "BLOCK_K": 2048, "num_warps": 8, "STAGES": 1}' --variant '{"BLOCK_N": 16, "BLOCK_K": 2048, "num_warps": 8, "STAGES": 3}' \
        --variant '{"BLOCK_N": 8, "BLOCK_K": 2048, "num_warps": 4, "STAGES": 1}' --variant '{"BLOCK_N": 8, "BLOCK_K": 2048, "num_warps": 8, "STAGES": 1}' \
        --variant '{"BLOCK_N": 4, "BLOCK_K": 2048, "num_warps": 4, "STAGES": 1}' --out-file "$OUT/ab-int8-one-step.json"
      timeout 330 python3 benchmarks/kernels.py --only gemv --shapes 32000x2048,256x2048,2048x2048 --max-trials 100 --runs 30 --peer-compiles 2 --retune --out-file "$OUT/kernels-gemv-pdl-int8-one-step.json" 2>&1 | grep -v "^  "
      ;;
    retune8)  # the int8 GEMV retuned under PDL with one-step programs in its space, the other llama-1b shapes and llama-8b, beside the compile peers (each compiled twice)
      timeout 560 python3 benchmarks/kernels.py --only gemv --gemv-kernels int8_gemv --shapes 5632x2048,2048x5632,8b --max-trials 100 --runs 30 --peer-compiles 2 --retune --out-file "$OUT/kernels-gemv-pdl-int8-retune.json" 2>&1 | grep -v "^  "
      ;;
    refine)  # a GEMV (int8_gemv, int4_gemv) retuned with the tuner's PDL trigger refinement (its finalists tried with "wait"), beside the compile peers (each compiled twice): KERNEL SHAPES TAG
      timeout 570 python3 benchmarks/kernels.py --only gemv --gemv-kernels "$2" --shapes "$3" --max-trials 100 --runs 30 --peer-compiles 2 --retune --out-file "$OUT/kernels-gemv-$2-refine-$4.json" 2>&1 | grep -v "^  "
      ;;
    tcclamp)  # (run at 33afa90 + CLAMP/PINGPONG keys, since removed: CLAMP is how the kernel reads now) the tensor-core int4 GEMV with its last prefetch clamped (CLAMP: no masked reads) or two steps an iteration (PINGPONG): GPU numerics, then against the tuned configs
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "tensor_core_rows or chain" 2>&1 | tail -2
      timeout 250 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336,32000x2048,2048x5632,128256x4096 \
        --variant '{"CLAMP": true}' --variant '{"PINGPONG": true}' --out-file "$OUT/ab-int4-tc-clamp.json"
      ;;
    wahead)  # (run at 26a6cbe; the W_AHEAD key is gone since: not kept) the tensor-core int4 GEMV reading its words two steps ahead (W_AHEAD 2): GPU numerics, then against the tuned configs, also with fewer splits / longer steps
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "tensor_core_rows or chain" 2>&1 | tail -2
      timeout 400 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336,32000x2048,2048x5632,128256x4096 \
        --variant '{"W_AHEAD": 2}' --variant '{"W_AHEAD": 2, "maxnreg": null}' --variant '{"W_AHEAD": 2, "SPLIT_K": 4}' --variant '{"W_AHEAD": 2, "BLOCK_N": 64, "num_warps": 4}' \
        --variant '{"W_AHEAD": 2, "BLOCK_K": 256}' --out-file "$OUT/ab-int4-tc-words-ahead.json"
      ;;
    tiledwords)  # the int4 tiled kernel (batch > 8) reading the tensor-core GEMV's words (TC_WORDS) against the packed bytes: GPU numerics, then head to head at batch 32 and 512
      AGNITRA_GPU_TESTS=1 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "tiled_kernel" 2>&1 | tail -2
      for m in 32 512; do
        timeout 200 python3 benchmarks/ab_config.py --kernel int4_tiled --m "$m" --max-trials 40 --shapes 4096x4096,14336x4096,4096x14336 \
          --variant '{"TC_WORDS": true, "BLOCK_K": 64}' --variant '{"TC_WORDS": true, "BLOCK_K": 128}' --variant '{"BLOCK_K": 64}' --variant '{"BLOCK_K": 128}' \
          --out-file "$OUT/ab-int4-tiled-words-m$m.json"
      done
      ;;
    onecopy)  # int4 weights kept once (the tensor-core words) against both copies (HEAD before the change, carried as .before/src): GPU numerics, then llama-1b decode end to end (per-token latency, prefill of 32 tokens, the variants' weight bytes)
      AGNITRA_GPU_TESTS=1 timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "int4 or tiled or words" 2>&1 | tail -4
      ro="compile(mode=reduce-overhead)"
      timeout 400 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int4,decode=false) + $ro" --json > "$OUT/bench-llama-1b-int4-one-copy.json"
      tail -c 300 "$OUT/bench-llama-1b-int4-one-copy.json"; echo
      [ -d .before/src ] && PYTHONPATH=.before/src:/tmp/site timeout 300 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "triton-kernels(weights=int4,decode=false) + $ro" --json > "$OUT/bench-llama-1b-int4-two-copies.json"
      tail -c 300 "$OUT/bench-llama-1b-int4-two-copies.json"; echo
      ;;
    onecopyab)  # int4 one copy against both copies in one process, interleaved (benchmarks/ab_int4_copies.py), after the GPU check of the unshuffle
      AGNITRA_GPU_TESTS=1 timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "unshuffle or keeps_the_weight_once or state_dict" 2>&1 | tail -2
      timeout 480 python3 benchmarks/ab_int4_copies.py --workload zoo:llama-1b --out-file "$OUT/ab-int4-copies-llama-1b.json" 2>&1 | grep -v "^  " | tail -5
      ;;
    onecopyab2)  # the same with the both-copies variant first, then again in the first order (is the order or the layout behind the difference?)
      timeout 280 python3 benchmarks/ab_int4_copies.py --workload zoo:llama-1b --both-first --out-file "$OUT/ab-int4-copies-llama-1b-both-first.json" 2>&1 | grep -v "^  " | tail -4
      timeout 280 python3 benchmarks/ab_int4_copies.py --workload zoo:llama-1b --out-file "$OUT/ab-int4-copies-llama-1b-again.json" 2>&1 | grep -v "^  " | tail -4
      ;;
    onecopy8b)  # llama-8b decode: int4 one copy and both copies (ab_int4_copies.py) beside bf16 compile, weights per variant
      timeout 580 python3 benchmarks/ab_int4_copies.py --workload zoo:llama-8b --out-file "$OUT/ab-int4-copies-llama-8b.json" 2>&1 | grep -v "^  " | tail -4
      ;;
    wordsop)  # the int4 layer's batch-1 call through the words-only op against packed bytes + words, layer chains in CUDA graphs at llama-1b's shapes (benchmarks/ab_int4_words_op.py)
      timeout 300 python3 benchmarks/ab_int4_words_op.py --out-file "$OUT/ab-int4-words-op-llama-1b.json" 2>&1 | tail -8
      ;;
    tmaring)  # (ran at 0c4a633; the W_TMA key is gone since: 9-27x slower, W_TMA 2 wrong on the GPU) the tensor-core int4 GEMV with its words (W_TMA 1; 2: x and the scales too) read by TMA through a ring of STAGES shared-memory buffers, against the tuned configs
      base='"PREFETCH": false, "X_NOW": false, "maxnreg": 0'
      v=(); for c in "1 3 64 256 4 2" "1 4 64 256 4 2" "1 3 64 512 4 2" "1 4 64 128 4 4" "1 4 64 256 4 4" "1 3 128 256 8 2" "2 3 64 256 4 2" "2 4 64 128 4 4"; do set -- $c
        v+=(--variant "{$base, \"W_TMA\": $1, \"STAGES\": $2, \"BLOCK_N\": $3, \"BLOCK_K\": $4, \"num_warps\": $5, \"SPLIT_K\": $6}"); done
      timeout 500 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 14336x4096,4096x14336,4096x4096 "${v[@]}" --out-file "$OUT/ab-int4-tc-tma-ring.json"
      ;;
    xnow)  # the tensor-core int4 GEMV reading x in the step that uses it (X_NOW: fewer registers held), with longer steps, more splits, register caps: GPU numerics, then against the tuned configs
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "tensor_core_rows or chain" 2>&1 | tail -2
      timeout 420 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336,32000x2048,128256x4096 \
        --variant '{"X_NOW": true}' --variant '{"X_NOW": true, "maxnreg": 96}' --variant '{"X_NOW": true, "BLOCK_K": 256}' --variant '{"X_NOW": true, "BLOCK_K": 256, "SPLIT_K": 4}' \
        --variant '{"X_NOW": true, "BLOCK_K": 256, "BLOCK_N": 64, "num_warps": 4}' --variant '{"X_NOW": true, "SPLIT_K": 16, "maxnreg": 80}' --out-file "$OUT/ab-int4-tc-x-now.json"
      ;;
    refinecached)  # GPU numerics of the tc kernel, then the GEMV rows with each cached tuning re-judged against its refinements first (autotune.refine): KERNEL SHAPES TAG
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "tensor_core_rows or chain" 2>&1 | tail -2
      timeout 450 python3 benchmarks/kernels.py --only gemv --gemv-kernels "$2" --shapes "$3" --max-trials 100 --runs 30 --refine --out-file "$OUT/kernels-gemv-$2-refined-$4.json" 2>&1 | grep -v "^  "
      ;;
    e2es14)  # llama-1b decode end to end at this commit: bf16 compile, int8 through the fused decode layer, int4 through the GEMVs, all under compile + CUDA graphs with PDL
      ro="compile(mode=reduce-overhead)"
      timeout 540 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --recipe "triton-kernels(weights=int4,decode=false) + $ro" --json > "$OUT/bench-llama-1b-s14.json"
      tail -c 600 "$OUT/bench-llama-1b-s14.json"
      ;;
    xnow2)  # X_NOW with two 16-row tiles a warp (x and its sums shared), register caps and splits, against the refined tc configs, per shape
      v='{"BLOCK_N": 128, "num_warps": 4, "BLOCK_K": 128, "X_NOW": true, "maxnreg": 128}'
      v2='{"BLOCK_N": 128, "num_warps": 4, "BLOCK_K": 128, "X_NOW": true, "maxnreg": 168}'
      v3='{"BLOCK_N": 256, "num_warps": 8, "BLOCK_K": 128, "X_NOW": true, "maxnreg": 128}'
      for shape_splits in "14336x4096 4 8" "4096x14336 16 8" "32000x2048 2 4"; do set -- $shape_splits
        timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes "$1" --variant "$v" --variant "$v2" --variant "$v3" \
          --variant "{\"BLOCK_N\": 128, \"num_warps\": 4, \"BLOCK_K\": 128, \"X_NOW\": true, \"maxnreg\": 128, \"SPLIT_K\": $2}" \
          --variant "{\"BLOCK_N\": 256, \"num_warps\": 8, \"BLOCK_K\": 128, \"X_NOW\": true, \"maxnreg\": 128, \"SPLIT_K\": $3}" --out-file "$OUT/ab-int4-tc-x-now-two-tiles-$1.json"
      done
      ;;
    refinedecode)  # the fused decode-step kernels' cached tunings re-judged against their refinements (PDL trigger), llama-1b shapes; then llama-1b int8 decode end to end
      timeout 300 python3 benchmarks/kernels.py --only decode --shapes 1b --max-trials 12 --runs 30 --refine --out-file "$OUT/kernels-decode-refined-1b.json" 2>&1 | grep -v "^  "
      ro="compile(mode=reduce-overhead)"
      timeout 270 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --json > "$OUT/bench-llama-1b-int8-decode-refined.json"
      tail -c 300 "$OUT/bench-llama-1b-int8-decode-refined.json"
      ;;
    decodeonestep)  # (the kernel change ran at 370d2cc, not kept) GPU numerics of the decode-step kernels, then the decode kernels retuned at llama-1b shapes (TPE, 24 trials)
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 90 tests/test_kernels_decode.py 2>&1 | tail -2
      timeout 420 python3 benchmarks/kernels.py --only decode --shapes 1b --max-trials 24 --runs 30 --retune --out-file "$OUT/kernels-decode-one-step-1b.json" 2>&1 | grep -v "^  "
      ;;
    abdecode)  # (ran at 370d2cc with benchmarks/ab_decode.py, since folded into ab_config.py --kernel decode_gemv) the fused LM head (decode_gemv 32000x2048) and down projection: tuned against one-step configs, head to head; then llama-1b int8 decode end to end
      timeout 150 python3 benchmarks/ab_config.py --kernel decode_gemv --shapes 32000x2048,2048x2048 --variant '{"BLOCK_N": 4, "BLOCK_K": 2048, "num_warps": 4, "PREFETCH": false}' \
        --variant '{"BLOCK_N": 2, "BLOCK_K": 2048, "num_warps": 4, "PREFETCH": false}' --variant '{"BLOCK_N": 8, "BLOCK_K": 2048, "num_warps": 8, "PREFETCH": false}' \
        --variant '{"BLOCK_N": 4, "BLOCK_K": 2048, "num_warps": 4, "PREFETCH": false, "PDL": "wait"}' --out-file "$OUT/ab-decode-one-step.json"
      bash "$0" decodee2e one-step-retuned
      ;;
    decodee2e)  # llama-1b int8 decode end to end through the fused decode layer, beside bf16 compile
      ro="compile(mode=reduce-overhead)"
      timeout 300 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --json > "$OUT/bench-llama-1b-int8-$2.json"
      tail -c 300 "$OUT/bench-llama-1b-int8-$2.json"
      ;;
    xnow512)  # X_NOW over 512-feature steps with the register cap raised, 4-warp programs, against the refined tc configs at the mid llama-8b shapes
      for shape_splits in "14336x4096 2 4" "4096x14336 4 8"; do set -- $shape_splits
        timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes "$1" \
          --variant "{\"BLOCK_N\": 64, \"num_warps\": 4, \"BLOCK_K\": 512, \"X_NOW\": true, \"maxnreg\": 168, \"SPLIT_K\": $2}" \
          --variant "{\"BLOCK_N\": 64, \"num_warps\": 4, \"BLOCK_K\": 512, \"X_NOW\": true, \"maxnreg\": 200, \"SPLIT_K\": $2}" \
          --variant "{\"BLOCK_N\": 64, \"num_warps\": 4, \"BLOCK_K\": 512, \"X_NOW\": true, \"maxnreg\": 255, \"SPLIT_K\": $3}" \
          --variant "{\"BLOCK_N\": 64, \"num_warps\": 4, \"BLOCK_K\": 256, \"X_NOW\": true, \"maxnreg\": 168, \"SPLIT_K\": $3}" --out-file "$OUT/ab-int4-tc-x-now-512-$1.json"
      done
      ;;
    tpefix)  # the int4 rows tuned afresh with a budget of 16 trials, by the tuner before the TPE fix (.before/src: carry it, the tree of 91a4836) and after it, each from an empty tuning cache
      for side in before after; do
        src=src; [ "$side" = before ] && src=.before/src
        mkdir -p /tmp/c-$side/ceilings; cp /tmp/agnitra-cache/ceilings/*.json /tmp/c-$side/ceilings/ 2>/dev/null
        AGNITRA_CACHE_DIR=/tmp/c-$side PYTHONPATH=$src:/tmp/site timeout 280 python3 benchmarks/kernels.py --only gemv --gemv-kernels int4_gemv --shapes 4096x4096,14336x4096,4096x14336 \
          --max-trials 16 --runs 30 --retune --out-file "$OUT/kernels-gemv-int4-tpe16-$side.json" 2>&1 | grep -v "^ "
      done
      ;;
    overlap)  # does a chain of PDL GEMVs overlap? the read-only floor with part of its reads after the wait (overlap_floor.py), and tc int4 configs of one or two programs an SM at both trigger points
      timeout 300 python3 benchmarks/overlap_floor.py --sizes 4096x2048,4096x4096,14336x2048 --out-file "$OUT/overlap-floor.json"
      timeout 260 python3 benchmarks/explore_gemv.py --shapes 4096x4096,14336x4096,4096x14336 --only int4 --int4-configs benchmarks/int4-tc-overlap.json --runs 20 --out-file "$OUT/gemv-explore-tc-overlap.json"
      ;;
    fixup)  # what the split-K fix-up costs: split configs of the int8 (4096x4096) and int4 tc GEMVs with the fix-up as it is (relaxed counter reset), fence-and-flags, none
      timeout 560 python3 benchmarks/fixup_cost.py --shapes 4096x4096,14336x4096,4096x14336 --kernels int8_gemv@4096x4096,int4_gemv --runs 20 --out-file "$OUT/fixup-cost.json"
      ;;
    warpk)  # (ran on the tree of b0550c0 with benchmarks/experiments/int4-tc-warp-k.patch applied; WARP_K is in the kernel since cfa7283, see warpkheld) the int4 tc GEMV with WARP_K (the warps split each step's features, summed in shared memory) against the tuned winners at llama-8b shapes, head to head
      AGNITRA_GPU_TESTS=1 timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "tensor_core" 2>&1 | tail -3
      wk() { tc_warp_k "$@"; }
      ab() { local shape=$1; shift; local vs=(); for v in "$@"; do vs+=(--variant "$v"); done
        timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes "$shape" --runs 20 "${vs[@]}" --out-file "$OUT/ab-int4-tc-warp-k-$shape.json"; }
      ab 4096x4096 "$(wk 16 4096 8 1 false)" "$(wk 16 2048 8 1 true)" "$(wk 16 2048 4 1 true)" "$(wk 16 1024 4 1 true)" "$(wk 32 2048 8 1 true)" "$(wk 16 2048 8 2 false)" "$(wk 16 2048 4 1 false)"
      ab 14336x4096 "$(wk 16 2048 8 1 true)" "$(wk 32 2048 8 1 true)" "$(wk 64 1024 4 1 true)" "$(wk 32 1024 4 1 true)" "$(wk 16 1024 4 1 true)" "$(wk 16 4096 8 1 false)" "$(wk 32 1024 8 1 true)"
      ab 4096x14336 "$(wk 16 2048 8 1 true)" "$(wk 16 1024 4 1 true)" "$(wk 16 1024 8 1 true)" "$(wk 32 2048 8 2 true)" "$(wk 16 2048 8 1 true true 128)" "$(wk 16 2048 4 1 true)" "$(wk 16 1024 4 2 true)"
      ;;
    warpkheld)  # the int4 tc GEMV with WARP_K (the warps split K, summed in shared memory) and one step a program: every word read before the PDL wait, against the tuned winners at llama-8b shapes, head to head
      AGNITRA_GPU_TESTS=1 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "tensor_core" 2>&1 | tail -3
      wk() { tc_warp_k "$1" "$2" "$3" "$4" true "${5:-false}" "${6:-0}" count; }
      ab() { local shape=$1; shift; local vs=(); for v in "$@"; do vs+=(--variant "$v"); done
        timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes "$shape" --runs 20 "${vs[@]}" --out-file "$OUT/ab-int4-tc-warp-k-held-$shape.json"; }
      ab 4096x4096 "$(wk 16 4096 4 1)" "$(wk 16 4096 8 1)" "$(wk 32 4096 8 1)" "$(wk 16 2048 4 1)" "$(wk 16 2048 4 2)" "$(wk 16 2048 8 2)" "$(wk 16 1024 4 4)" "$(wk 32 2048 8 2)"
      ab 4096x14336 "$(wk 16 2048 8 1 true 128)" "$(wk 16 2048 4 7)" "$(wk 16 2048 8 7)" "$(wk 32 2048 8 7)" "$(wk 16 1024 4 14)" "$(wk 32 2048 8 1 true 128)"
      ab 14336x4096 "$(wk 16 4096 4 1)" "$(wk 16 4096 8 1)" "$(wk 16 2048 4 2)" "$(wk 32 4096 8 1)" "$(wk 16 1024 4 4)"
      ;;
    warpkheld2)  # the int4 4096x4096 row tuned afresh (bucket v15: the held tc configs, `_tc_held_shapes`, in its space) with peers; the v14 winner and held configs at each PDL trigger and fix-up, head to head, and in a decode step's chain at the o projection
      hk() { tc_warp_k 16 "$1" "$2" "$3" true false 0 "${4:-count}" "${5:-\"wait\"}"; }
      v14='{"WARP_K": false, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "SPLIT_K": 8, "PREFETCH": true, "maxnreg": 128, "FIXUP": "count", "PDL": "wait"}'
      timeout 300 python3 benchmarks/kernels.py --only gemv --gemv-kernels int4_gemv --shapes 4096x4096 --runs 30 --max-trials 128 --out-file "$OUT/kernels-gemv-int4-v15-4096.json" 2>&1 | grep -v "^ "
      timeout 120 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x4096 --runs 30 --variant "$v14" --variant "$(hk 4096 4 1)" --variant "$(hk 4096 4 1 count true)" \
        --variant "$(hk 2048 2 2)" --variant "$(hk 2048 2 2 wait)" --out-file "$OUT/ab-int4-tc-held-4096x4096-b.json" 2>&1 | tail -2
      timeout 120 python3 benchmarks/chain_ab.py --variant "0:$v14" --variant "0:$(hk 4096 4 1)" --variant "0:$(hk 4096 4 1 count true)" --out-file "$OUT/chain-int4-held.json" 2>&1 | tail -4
      ;;
    waitdebug)  # the one-round-trip 'wait' split-K fix-up (bounded spin or not) in back-to-back launches and the timing harness: give-ups, slots left off the sentinel, wrong outputs
      timeout 150 python3 benchmarks/fixup_wait_debug.py --variant "${2:-wait}" --batches 3 --launches 40 --out-file "$OUT/fixup-wait-debug-${2:-wait}.json" 2>&1 | tail -12
      ;;
    rawpair)  # (ran with a Q_EXACT key since dropped) tc GEMV with MMA operands MAGIC + q (no packed FMA) and B fragments as loaded register pairs: GPU numerics; the cached int4 winners head to head with Q_EXACT (the FMA back), and HEAD before the change (.before/src: carry it) right after
      AGNITRA_GPU_TESTS=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "gpu or tc or tensor_core" 2>&1 | tail -3
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336,128256x4096 --variant '{"Q_EXACT": true}' --out-file "$OUT/ab-int4-tc-raw-pairs.json" 2>&1 | tail -8
      [ -d .before/src ] && PYTHONPATH=.before/src:/tmp/site timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336,128256x4096 --variant '{}' --out-file "$OUT/ab-int4-tc-raw-pairs-before.json" 2>&1 | tail -8
      ;;
    parts)  # (ran with benchmarks/experiments/int4-tc-parts.patch and int4-tc-ahead.patch applied to 1030066; AHEAD not kept) where the tc GEMV's time goes under PDL: the cached winners beside themselves without the split-K fix-up (PART 1), without the MMAs (2), neither (3), and 3 without the (s, z) reads (5); then AHEAD (weights read steps ahead into registers, the first before the wait): GPU numerics, the winners with AHEAD, and one-program-an-SM grids at 4096x4096
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "gpu or tensor_core" 2>&1 | tail -3
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336 --time-failed \
        --variant '{"PART": 1}' --variant '{"PART": 2}' --variant '{"PART": 3}' --variant '{"PART": 5}' --out-file "$OUT/ab-int4-tc-parts.json" 2>&1 | tail -4
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336,128256x4096 \
        --variant '{"AHEAD": 2}' --variant '{"AHEAD": 4}' --variant '{"AHEAD": 64}' --variant '{"AHEAD": 64, "PDL": "wait"}' --variant '{"AHEAD": 64, "maxnreg": 0}' --out-file "$OUT/ab-int4-tc-ahead.json" 2>&1 | tail -5
      one='"BLOCK_N": 128, "SPLIT_K": 4, "num_warps": 8, "X_NOW": true, "maxnreg": 0'
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096 \
        --variant "{$one, \"BLOCK_K\": 128, \"AHEAD\": 8}" --variant "{$one, \"BLOCK_K\": 128, \"AHEAD\": 8, \"PDL\": \"wait\"}" --variant "{$one, \"BLOCK_K\": 256, \"AHEAD\": 4}" \
        --variant "{$one, \"BLOCK_K\": 256, \"AHEAD\": 4, \"PDL\": \"wait\"}" --variant "{$one, \"BLOCK_K\": 128, \"maxnreg\": 128}" --out-file "$OUT/ab-int4-tc-ahead-one-an-sm.json" 2>&1 | tail -3
      ;;
    narrow)  # tc GEMV configs of one or two 16-row tiles a program (1-2 warps), split 1-4: many small programs, little or no split-K fix-up (SHAPES, default the three open llama-8b rows)
      timeout 560 python3 benchmarks/explore_gemv.py --shapes "${2:-14336x4096,4096x4096,4096x14336}" --only int4 --int4-configs benchmarks/int4-tc-narrow.json --runs 20 --out-file "$OUT/gemv-explore-tc-narrow.json"
      ;;
    narrowwait)  # tc GEMV configs of 1-4 tiles a warp on 1-2 warps, split 2-8, the next kernel let in at the wait (SHAPES, default the three open llama-8b rows); GPU tests of the tc kernel first, failures named
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_kernels_quant.py -k "gpu or tensor_core" 2>&1 | tail -6
      timeout 560 python3 benchmarks/explore_gemv.py --shapes "${2:-14336x4096,4096x4096,4096x14336}" --only int4 --int4-configs benchmarks/int4-tc-narrow-wait.json --runs 20 --out-file "$OUT/gemv-explore-tc-narrow-wait.json"
      ;;
    retune13)  # the int4 GEMV rows at llama-8b shapes tuned afresh (bucket v13: small tensor-core programs let the next kernel in at the wait), exhaustively, peers in the same run (SHAPES TAG)
      timeout 560 python3 benchmarks/kernels.py --only gemv --gemv-kernels int4_gemv --shapes "${2:-14336x4096,4096x4096}" --runs 30 --max-trials 128 --out-file "$OUT/kernels-gemv-int4-v13-${3:-a}.json" 2>&1 | grep -v "^ "
      ;;
    retune14)  # GPU tests of the tc kernel's fix-ups (the waiting one cooperative), then the int4 GEMV rows at llama-8b shapes tuned afresh (bucket v14: the finalists refined with the waiting fix-up too), exhaustively, peers in the same run (SHAPES TAG)
      [ "${4:-tests}" = tests ] && { AGNITRA_GPU_TESTS=1 timeout 240 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_quant.py -k "waiting or slots or tensor_core_rows_kernel or gpu_kernels_match or chain" > "$OUT/gpu-tests-retune14.txt" 2>&1; echo "pytest rc $?"; grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu-tests-retune14.txt" | tail -6; }
      timeout 440 python3 benchmarks/kernels.py --only gemv --gemv-kernels int4_gemv --shapes "${2:-14336x4096,4096x4096}" --runs 30 --max-trials 128 --out-file "$OUT/kernels-gemv-int4-v14-${3:-a}.json" 2>&1 | grep -v "^ "
      ;;
    waitab)  # the v14 winner at 14336x4096 (FIXUP wait) against its neighbours, head to head (the winner twice: the run's noise)
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{}' --variant '{"PDL": true}' --variant '{"BLOCK_K": 256}' --variant '{"SPLIT_K": 2}' \
        --variant '{"SPLIT_K": 8}' --variant '{"FIXUP": "count"}' --variant '{"BLOCK_N": 32, "BLOCK_K": 256, "X_NOW": true}' --out-file "$OUT/ab-int4-tc-waiting-14336x4096.json" 2>&1 | tail -3
      ;;
    record8b)  # the file of record for the llama-8b GEMV rows (int8 and int4), the GPU settled first (benchmarks/steady.py), cached tunings (the missing tuned exhaustively), peers in the same run; the 14336x4096 int4 winner head to head settled
      timeout 100 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{}' --out-file "$OUT/ab-int4-settled-14336x4096.json" 2>&1 | tail -2
      timeout 480 python3 benchmarks/kernels.py --only gemv --shapes 8b --runs 30 --max-trials 128 --out-file "$OUT/kernels-gemv-8b-settled${TAG:+-$TAG}.json" 2>&1 | grep -v "^ "
      ;;
    fused8b)  # the llama-8b decode GEMVs at the shapes Agnitra's pipeline runs them after fuse-projections (q, k, v stacked: 6144x4096; gate and up: 28672x4096), tuned afresh, peers in the same run: beside the file of record's per-projection rows, not instead of them
      timeout 560 python3 benchmarks/kernels.py --only gemv --shapes 6144x4096,28672x4096 --runs 30 --max-trials 128 --out-file "$OUT/kernels-gemv-8b-fused.json" 2>&1 | grep -v "^ "
      ;;
    nextpf)  # (needs benchmarks/experiments/int4-tc-next-prefetch.patch) the tuned tc GEMVs asking L2 for the next call's first steps, head to head without, same shape and a decode step's chain (BUDGETS: caps); outputs checked bitwise
      timeout 400 python3 benchmarks/next_prefetch.py --shapes "${2:-14336x4096,4096x4096,4096x14336}" --steps "${3:-1,2,4}" --chain "${4:-4096x4096,14336x4096,14336x4096,4096x14336}" --budgets "${BUDGETS:-0.05,0.1,0.2}" --askers "${ASKERS:-}" \
        --out-file "$OUT/next-prefetch-int4.json" 2>&1 | tail -5
      ;;
    splits14)  # small one-warp tc programs (BN16, 8 steps of 128 each) at splits that are no power of two, FIXUP wait and count, against the tuned winners, head to head
      small='"BLOCK_N": 16, "BLOCK_K": 128, "num_warps": 1, "PDL": "wait", "X_NOW": false, "maxnreg": 0'
      timeout 240 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant '{}' \
        --variant "{$small, \"SPLIT_K\": 14, \"FIXUP\": \"wait\"}" --variant "{$small, \"SPLIT_K\": 14, \"FIXUP\": \"count\"}" \
        --variant "{$small, \"SPLIT_K\": 7, \"FIXUP\": \"wait\"}" --variant "{$small, \"SPLIT_K\": 8, \"FIXUP\": \"wait\"}" \
        --variant "{$small, \"SPLIT_K\": 8, \"FIXUP\": \"count\"}" --variant "{$small, \"SPLIT_K\": 12, \"FIXUP\": \"wait\"}" \
        --variant '{"BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 1, "PDL": "wait", "X_NOW": true, "maxnreg": 0, "SPLIT_K": 14, "FIXUP": "wait"}' \
        --out-file "$OUT/ab-int4-tc-splits14-4096x14336.json" 2>&1 | tail -3
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x4096 --variant '{}' \
        --variant "{$small, \"SPLIT_K\": 8, \"FIXUP\": \"wait\"}" --variant "{$small, \"SPLIT_K\": 12, \"FIXUP\": \"wait\"}" --variant "{$small, \"SPLIT_K\": 14, \"FIXUP\": \"wait\"}" \
        --out-file "$OUT/ab-int4-tc-splits14-4096x4096.json" 2>&1 | tail -3
      timeout 120 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{}' --variant '{"SPLIT_K": 3}' --variant '{"SPLIT_K": 5}' \
        --out-file "$OUT/ab-int4-tc-splits14-14336x4096.json" 2>&1 | tail -3
      ;;
    splits14b)  # 4096x14336: S14 one-warp programs with FIXUP wait under register caps (resident), BK256 splits, against the tuned winner
      small='"BLOCK_N": 16, "num_warps": 1, "PDL": "wait", "X_NOW": false, "FIXUP": "wait"'
      timeout 240 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant '{}' \
        --variant "{$small, \"BLOCK_K\": 128, \"SPLIT_K\": 14, \"maxnreg\": 72}" --variant "{$small, \"BLOCK_K\": 128, \"SPLIT_K\": 14, \"maxnreg\": 80}" \
        --variant "{$small, \"BLOCK_K\": 128, \"SPLIT_K\": 14, \"maxnreg\": 64}" --variant "{$small, \"BLOCK_K\": 128, \"SPLIT_K\": 12, \"maxnreg\": 0}" \
        --variant "{$small, \"BLOCK_K\": 256, \"SPLIT_K\": 7, \"maxnreg\": 0}" --variant "{$small, \"BLOCK_K\": 256, \"SPLIT_K\": 14, \"maxnreg\": 80}" \
        --variant "{$small, \"BLOCK_K\": 128, \"SPLIT_K\": 14, \"maxnreg\": 80, \"PDL\": true}" \
        --out-file "$OUT/ab-int4-tc-splits14b-4096x14336.json" 2>&1 | tail -3
      ;;
    xnowreg)  # one-warp tc programs with x read in the step that uses it (X_NOW) under a 72-register cap: ptxas then issues the next step's weight reads before this step's MMAs (uncapped, or with x prefetched, it sinks them below) and 28 programs an SM stay resident; against the tuned winners head to head
      small='"BLOCK_N": 16, "BLOCK_K": 128, "num_warps": 1, "PDL": "wait", "FIXUP": "wait"'
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{}' --variant '{"X_NOW": true}' --variant '{"X_NOW": true, "maxnreg": 72}' \
        --variant '{"maxnreg": 72}' --variant '{"X_NOW": true, "maxnreg": 72, "PDL": true}' --variant '{"X_NOW": true, "maxnreg": 64}' --out-file "$OUT/ab-int4-tc-xnowreg-14336x4096.json" 2>&1 | tail -3
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant '{}' --variant "{$small, \"SPLIT_K\": 14, \"maxnreg\": 72}" \
        --variant "{$small, \"SPLIT_K\": 14, \"X_NOW\": true, \"maxnreg\": 72}" --variant "{$small, \"SPLIT_K\": 8, \"X_NOW\": true, \"maxnreg\": 72}" \
        --variant "{$small, \"SPLIT_K\": 14, \"X_NOW\": true, \"maxnreg\": 64}" --out-file "$OUT/ab-int4-tc-xnowreg-4096x14336.json" 2>&1 | tail -3
      timeout 120 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x4096 --variant '{}' --variant "{$small, \"SPLIT_K\": 4, \"X_NOW\": true, \"maxnreg\": 72}" \
        --variant "{$small, \"SPLIT_K\": 8, \"X_NOW\": true, \"maxnreg\": 72}" --variant "{$small, \"SPLIT_K\": 8, \"maxnreg\": 72}" --out-file "$OUT/ab-int4-tc-xnowreg-4096x4096.json" 2>&1 | tail -3
      ;;
    smemdiag)  # why the tc GEMV streamed through shared memory (STAGES, cp.async) ran 20-70x slower (stagess1): the 14336x4096 winner with STAGES 3 under PDL, without PDL, with the counter fix-up, head to head; then ncu counters of one launch each (no graph, no PDL chain)
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{"PREFETCH": false, "STAGES": 3}' --variant '{"PREFETCH": false, "STAGES": 3, "PDL": false}' \
        --variant '{"PREFETCH": false, "STAGES": 3, "FIXUP": "count"}' --variant '{"PREFETCH": false, "STAGES": 3, "FIXUP": "count", "PDL": false}' --variant '{"PDL": false}' \
        --out-file "$OUT/ab-int4-tc-smem-diag-14336x4096.json" 2>&1 | tail -3
      win='"KERNEL": "tc", "BLOCK_N": 16, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 1, "PREFETCH": true'
      ncu_gemv 14336 4096 "$OUT/ncu-gemv-tc-smem-diag.txt" "{$win}" "{$win, \"PREFETCH\": false, \"STAGES\": 3}"
      grep -E "Duration|Registers Per|Shared Memory Config|Dynamic Shared|Achieved Occupancy|Theoretical Occupancy|Block Limit|Memory Throughput|L1/TEX Hit|Bank" "$OUT/ncu-gemv-tc-smem-diag.txt" | head -60
      ;;
    l2ahead)  # (L2_AHEAD not kept: apply benchmarks/experiments/int4-tc-l2-ahead.patch first) the tc GEMV asking L2 for its own later steps' lines before its PDL wait (L2_AHEAD steps after the first): GPU numerics, then the tuned winners with it, head to head
      AGNITRA_GPU_TESTS=1 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "l2_ahead or waiting_fixup_matches" 2>&1 | tail -2
      for shape in 4096x4096 14336x4096 4096x14336; do
        timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes $shape --variant '{}' --variant '{"L2_AHEAD": 1}' --variant '{"L2_AHEAD": 2}' \
          --variant '{"L2_AHEAD": 4}' --variant '{"L2_AHEAD": 8}' --out-file "$OUT/ab-int4-tc-l2-ahead-$shape.json" 2>&1 | tail -1
      done
      ;;
    l2chain)  # (needs benchmarks/experiments/int4-tc-l2-ahead.patch) L2_AHEAD 1 in a decode step's chain (o 4096x4096, gate and up 14336x4096, down 4096x14336) against the tuned chain, head to head (benchmarks/chain_ab.py); then the three rows again
      timeout 200 python3 benchmarks/chain_ab.py --variant '{"L2_AHEAD": 1}' --variant '1,2,3:{"L2_AHEAD": 1}' --variant '1,2:{"L2_AHEAD": 1}' --variant '3:{"L2_AHEAD": 1}' \
        --variant '{"L2_AHEAD": 2}' --out-file "$OUT/chain-int4-l2-ahead.json" 2>&1 | tail -2
      for shape in 14336x4096 4096x14336; do
        timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes $shape --variant '{}' --variant '{"L2_AHEAD": 1}' --out-file "$OUT/ab-int4-tc-l2-ahead-1-$shape.json" 2>&1 | tail -1
      done
      ;;
    heldfloor)  # the read floor of a dependent GEMV chain: pre-wait reads held in registers until after the wait, x read after it (held_floor.py), beside overlap_floor's consuming chain timed again
      timeout 560 python3 benchmarks/held_floor.py --sizes "${2:-4096x2048,14336x2048,4096x7168,4096x4096}" --out-file "$OUT/held-floor.json" 2>&1 | grep -v Warning | tail -20
      ;;
    heldgemv)  # the held floor over the tensor-core GEMV's own shapes of work (tiles a warp, 128-256 features a step, 1-8 warps, splits 1-16)
      timeout 560 python3 benchmarks/held_floor.py --gemv-like --sizes "${2:-14336x2048,4096x2048}" --out-file "$OUT/held-floor-gemv-like.json" 2>&1 | grep -v Warning | tail -20
      ;;
    pipeearly)  # (PIPE_EARLY not kept: git apply benchmarks/experiments/pipe-early.patch first) PIPE_EARLY: the tc GEMV's shared-memory pipeline (STAGES) with the PDL wait inside its first step, so the first STAGES - 1 steps' weights are in flight before it; GPU numerics and the PDL chain, then against the tuned winners and the plain pipeline (with and without PDL) head to head
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "early or chain_reads or tensor_core_rows_kernel" 2>&1 | tail -2
      e='"PREFETCH": false, "X_NOW": false, "PIPE_EARLY": true'
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x4096 --variant '{"PDL": false}' --variant '{"PREFETCH": false, "STAGES": 5, "PDL": false}' --variant '{"PREFETCH": false, "STAGES": 5}' \
        --variant "{$e, \"STAGES\": 5}" --variant "{$e, \"STAGES\": 3}" --variant "{$e, \"STAGES\": 3, \"BLOCK_K\": 256}" --variant "{$e, \"STAGES\": 8, \"SPLIT_K\": 2}" \
        --out-file "$OUT/ab-int4-tc-pipe-early-4096x4096.json" 2>&1 | tail -3
      timeout 120 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant '{"PDL": false}' --variant '{"PREFETCH": false, "X_NOW": false, "STAGES": 4, "PDL": false}' \
        --variant "{$e, \"STAGES\": 4}" --variant "{$e, \"STAGES\": 8, \"BLOCK_K\": 128}" --out-file "$OUT/ab-int4-tc-pipe-early-4096x14336.json" 2>&1 | tail -3
      timeout 120 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant "{$e, \"STAGES\": 5, \"BLOCK_N\": 64, \"SPLIT_K\": 8, \"num_warps\": 4, \"FIXUP\": \"count\"}" \
        --variant "{$e, \"STAGES\": 8, \"BLOCK_N\": 64, \"SPLIT_K\": 4, \"num_warps\": 4, \"FIXUP\": \"count\"}" --variant '{"PREFETCH": false, "STAGES": 5, "BLOCK_N": 64, "SPLIT_K": 8, "num_warps": 4, "FIXUP": "count", "PDL": false}' \
        --out-file "$OUT/ab-int4-tc-pipe-early-14336x4096.json" 2>&1 | tail -3
      ;;
    pipeearly8)  # (needs benchmarks/experiments/pipe-early.patch) PIPE_EARLY for the int8 GEMV: its STAGES pipeline's first STAGES - 1 weight tiles read before the PDL wait, x after it; GPU numerics and the PDL chain, then against the tuned winners head to head
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "early or chain_reads or int8" 2>&1 | tail -2
      timeout 160 python3 benchmarks/ab_config.py --kernel int8_gemv --shapes 4096x4096 --variant '{"PIPE_EARLY": true}' --variant '{"PIPE_EARLY": true, "STAGES": 4}' \
        --variant '{"PIPE_EARLY": true, "STAGES": 5}' --variant '{"PIPE_EARLY": true, "STAGES": 5, "BLOCK_K": 512}' --variant '{"PIPE_EARLY": true, "STAGES": 3, "BLOCK_K": 2048}' \
        --variant '{"PIPE_EARLY": true, "STAGES": 5, "BLOCK_N": 4}' --variant '{"PIPE_EARLY": true, "STAGES": 5, "PDL": "wait"}' --out-file "$OUT/ab-int8-pipe-early-4096x4096.json" 2>&1 | tail -3
      timeout 130 python3 benchmarks/ab_config.py --kernel int8_gemv --shapes 4096x14336 --variant '{"PIPE_EARLY": true}' --variant '{"PIPE_EARLY": true, "STAGES": 5}' \
        --variant '{"PIPE_EARLY": true, "STAGES": 8}' --out-file "$OUT/ab-int8-pipe-early-4096x14336.json" 2>&1 | tail -3
      timeout 130 python3 benchmarks/ab_config.py --kernel int8_gemv --shapes 14336x4096 --variant '{"PIPE_EARLY": true, "STAGES": 2}' --variant '{"PIPE_EARLY": true, "STAGES": 3, "BLOCK_K": 2048}' \
        --variant '{"STAGES": 2}' --out-file "$OUT/ab-int8-pipe-early-14336x4096.json" 2>&1 | tail -3
      ;;
    heldtail)  # does reading more before the PDL wait still pay when a kernel ends latency-bound? the held floor at the tc winners' shapes of work with TAIL dependent L2 round trips before its store (held_floor.py --tail-test)
      timeout 250 python3 benchmarks/held_floor.py --sizes 4096x2048 --tail-test 64,16,8,4 --tails 0,2,4,8 --out-file "$OUT/held-floor-tail-4096x2048.json" 2>&1 | tail -16
      timeout 250 python3 benchmarks/held_floor.py --sizes 14336x2048 --tail-test 16,16,4,1 --tails 0,2,4,8 --out-file "$OUT/held-floor-tail-14336x2048.json" 2>&1 | tail -16
      ;;
    held)  # (HELD not kept: git apply benchmarks/experiments/int4-tc-held.patch first) HELD: the tc GEMV's first steps read before the PDL wait and held (the held floor, held_floor.py, gains 0.6 us at the winners' own shapes of work from holding more than one step), and the floor's best shapes of work; against the tuned winners head to head
      AGNITRA_GPU_TESTS=1 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "held_steps or tensor_core_rows_kernel" 2>&1 | tail -2
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x4096 --variant '{"HELD": 2}' --variant '{"HELD": 4}' --variant '{"HELD": 4, "FIXUP": "wait"}' \
        --variant '{"BLOCK_N": 128, "BLOCK_K": 256, "num_warps": 4}' --variant '{"BLOCK_N": 128, "BLOCK_K": 256, "num_warps": 4, "HELD": 2}' \
        --variant '{"BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 2, "HELD": 2}' --out-file "$OUT/ab-int4-tc-held-4096x4096.json" 2>&1 | tail -3
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{"HELD": 2}' --variant '{"HELD": 4}' --variant '{"HELD": 2, "maxnreg": 80}' \
        --variant '{"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 4, "FIXUP": "count"}' --variant '{"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 4, "FIXUP": "count", "HELD": 2}' \
        --variant '{"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 4, "num_warps": 2, "FIXUP": "count"}' --variant '{"BLOCK_N": 128, "BLOCK_K": 256, "SPLIT_K": 4, "num_warps": 4, "FIXUP": "count"}' \
        --out-file "$OUT/ab-int4-tc-held-14336x4096.json" 2>&1 | tail -3
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant '{"HELD": 2}' --variant '{"HELD": 3}' --variant '{"HELD": 4}' --variant '{"HELD": 7}' \
        --out-file "$OUT/ab-int4-tc-held-4096x14336.json" 2>&1 | tail -3
      ;;
    warpksmall)  # (measured, not kept: 1% at 4096x14336 only, see warpksmall2) WARP_K on the small programs that win at 14336x4096: two or four warps split one 16-row tile's step (fewer split-K partials, the rest summed in shared memory), waiting or counter fix-up, against the tuned winners head to head
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant "$(tc_warp_k 16 256 2 2 true false 0 wait)" --variant "$(tc_warp_k 16 256 2 2 true true 0 wait)" \
        --variant "$(tc_warp_k 32 256 2 4 true false 0 wait)" --variant "$(tc_warp_k 16 256 2 4 true false 0 count)" --variant "$(tc_warp_k 16 128 2 4 true false 0 count)" \
        --variant "$(tc_warp_k 16 512 4 2 true false 0 count)" --out-file "$OUT/ab-int4-tc-warp-k-small-14336x4096.json" 2>&1 | tail -3
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant "$(tc_warp_k 16 256 2 8 true true 0 wait '"wait"')" \
        --variant "$(tc_warp_k 16 512 4 4 true true 0 wait '"wait"')" --variant "$(tc_warp_k 32 512 4 8 true true 0 wait '"wait"')" \
        --out-file "$OUT/ab-int4-tc-warp-k-small-4096x14336.json" 2>&1 | tail -3
      ;;
    warpksmall2)  # (measured, not kept: BN16 BK256 2 warps S8 X_NOW took 12.64/12.70 us against the tuned 12.76/12.82, within the record's run-to-run spread; all else slower) around warpksmall's lead at 4096x14336 (two warps splitting a 16-row tile's step, 8 splits, waiting fix-up): splits, steps, warps, tiles, x read in time or ahead, fix-ups, head to head
      vs=(); for a in "16 256 2 8 true true 0 wait" "16 256 2 8 true false 0 wait" "16 128 2 8 true true 0 wait" "16 256 2 7 true true 0 wait" "16 256 2 4 true true 0 wait" \
        "16 512 4 2 true true 0 wait" "16 256 2 8 true true 0 count" "32 256 2 8 true true 0 wait" "16 1024 8 2 true true 0 wait" "16 512 4 4 true true 0 count"; do
        vs+=(--variant "$(tc_warp_k $a '"wait"')"); done
      timeout 300 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 "${vs[@]}" --out-file "$OUT/ab-int4-tc-warp-k-small-4096x14336-b.json" 2>&1 | tail -3
      ;;
    heldnarrow)  # (HELD not kept: git apply benchmarks/experiments/int4-tc-held.patch first) HELD (the first steps read before the PDL wait, held in registers) at the narrow one-warp 14336x4096 winner, whose waiting fix-up refused it when it was last tried; narrow HELD configs at 4096x14336. Every HELD variant lost, so the chain line (its HELD 2 variants refused too: without a register cap they do not fit the cooperative launch) was dropped
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "held_steps or waiting_fixup_matches" 2>&1 | tail -2
      timeout 170 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{"HELD": 2}' --variant '{"HELD": 2, "X_NOW": true}' \
        --variant '{"HELD": 3, "X_NOW": true, "maxnreg": 72}' --variant '{"HELD": 2, "maxnreg": 72}' --variant '{"HELD": 4, "FIXUP": "count"}' \
        --variant '{"HELD": 3, "FIXUP": "count"}' --variant '{"HELD": 2, "FIXUP": "count"}' --variant '{"FIXUP": "count"}' \
        --out-file "$OUT/ab-int4-tc-held-narrow-14336x4096.json" 2>&1 | tail -3
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 \
        --variant '{"BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 1, "X_NOW": true, "PDL": "wait", "FIXUP": "wait", "maxnreg": 0}' \
        --variant '{"BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 1, "X_NOW": true, "PDL": "wait", "FIXUP": "wait", "maxnreg": 0, "HELD": 2}' \
        --variant '{"BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 1, "X_NOW": true, "PDL": "wait", "FIXUP": "count", "maxnreg": 0, "HELD": 4}' \
        --variant '{"BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 1, "X_NOW": true, "PDL": "wait", "FIXUP": "wait", "maxnreg": 0, "HELD": 2}' \
        --out-file "$OUT/ab-int4-tc-held-narrow-4096x14336.json" 2>&1 | tail -3
      ;;
    chainrank)  # does a decode step's chain (o, gate, up, down) rank the tuned choices as the chain of one shape did? the tuned chain against its PDL trigger points and fix-ups changed per position, head to head (benchmarks/chain_ab.py)
      timeout 250 python3 benchmarks/chain_ab.py --variant '{"PDL": false}' --variant '1,2:{"FIXUP": "count"}' --variant '1,2:{"PDL": true}' --variant '0:{"PDL": true}' \
        --variant '3:{"PDL": "wait"}' --variant '1,2:{"PDL": true, "FIXUP": "count"}' --out-file "$OUT/chain-int4-rank.json" 2>&1 | tail -2
      ;;
    peerinf)  # the tuned int4 GEMV (SHAPES, default 14336x4096) head to head with each subset of kernels.py's contenders, twice
      timeout 300 python3 benchmarks/peer_influence.py --shapes "${2:-14336x4096}" --out-file "$OUT/peer-influence-int4.json" 2>&1 | tail -12
      ;;
    peerdrift)  # the tuned int4 GEMV (SHAPES) alone before and after cuBLAS and idle pauses, with the GPU's clocks
      timeout 300 python3 benchmarks/peer_influence.py --drift --shapes "${2:-14336x4096}" --out-file "$OUT/peer-drift-int4.json" 2>&1 | tail -12
      ;;
    narrows16)  # the small-program tc configs (PDL wait) at split 16 (SHAPES, default 4096x14336,4096x4096)
      timeout 300 python3 benchmarks/explore_gemv.py --shapes "${2:-4096x14336,4096x4096}" --only int4 --int4-configs benchmarks/int4-tc-narrow-s16.json --runs 20 --out-file "$OUT/gemv-explore-tc-narrow-s16.json"
      ;;
    parts13)  # (needs benchmarks/experiments/int4-tc-parts.patch) the v13 winners' decomposition (as parts), and more small-program shapes against the 14336x4096 winner, head to head
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 128 --shapes 14336x4096,4096x4096 --time-failed \
        --variant '{"PART": 1}' --variant '{"PART": 3}' --out-file "$OUT/ab-int4-tc-parts-v13.json" 2>&1 | tail -3
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 128 --shapes 14336x4096 \
        --variant '{"BLOCK_K": 64}' --variant '{"BLOCK_K": 64, "SPLIT_K": 8}' --variant '{"BLOCK_N": 32, "num_warps": 2}' --variant '{"maxnreg": 64}' \
        --variant '{"SPLIT_K": 2}' --variant '{"BLOCK_K": 256}' --out-file "$OUT/ab-int4-tc-small-14336x4096.json" 2>&1 | tail -3
      ;;
    atomicfix)  # (ATOMIC_FIXUP not kept: apply benchmarks/experiments/int4-tc-atomic-fixup.patch to 3990e9f first) the tc GEMV's split-K fix-up by one fixed-point atomic an output (ATOMIC_FIXUP) against the counter fix-up, head to head at the v13 winners (GPU tests first)
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_kernels_quant.py -k "gpu or tensor_core" 2>&1 | tail -4
      timeout 300 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 128 --shapes 14336x4096,4096x4096,4096x14336 \
        --variant '{"ATOMIC_FIXUP": true}' --out-file "$OUT/ab-int4-tc-atomic-fixup.json" 2>&1 | tail -3
      ;;
    lowreg)  # tc GEMV configs of at most 80 registers a thread (X_NOW), so that under PDL the next kernel's programs fit beside this one's, at both trigger points, beside the tuned winners (SHAPES, default the three open llama-8b rows)
      timeout 560 python3 benchmarks/explore_gemv.py --shapes "${2:-4096x4096,14336x4096,4096x14336}" --only int4 --int4-configs benchmarks/int4-tc-lowreg.json --runs 20 --out-file "$OUT/gemv-explore-tc-lowreg-${3:-all}.json"
      ;;
    cluster)  # (CLUSTER not kept: apply benchmarks/experiments/int4-tc-cluster.patch first) tc GEMV split-K fix-up in distributed shared memory (CLUSTER: a block's splits one thread-block cluster): GPU numerics (bitwise against the counter fix-up), then the tuned winners with CLUSTER head to head
      AGNITRA_GPU_TESTS=1 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "cluster or tensor_core_rows_kernel or gpu_kernels_match" 2>&1 | tail -4
      timeout 250 python3 benchmarks/ab_config.py --kernel int4_gemv --max-trials 30 --shapes 4096x4096,14336x4096,4096x14336 --variant '{"CLUSTER": true}' --variant '{"CLUSTER": true, "PDL": "wait"}' --out-file "$OUT/ab-int4-tc-cluster.json" 2>&1 | tail -6
      ;;
    clustersmall)  # (needs benchmarks/experiments/int4-tc-cluster.patch) the cluster fix-up on small programs (a 16-row tile on one warp, the v13 space's family): GPU numerics, then head to head against the v13 winners, per shape
      AGNITRA_GPU_TESTS=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "cluster or tensor_core_rows_kernel" 2>&1 | tail -4
      small='"BLOCK_N": 16, "num_warps": 1, "BLOCK_K": 128, "X_NOW": false, "maxnreg": null, "PDL": "wait"'
      timeout 170 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant '{"CLUSTER": true}' --variant '{"CLUSTER": true, "SPLIT_K": 8}' --variant '{"CLUSTER": true, "SPLIT_K": 2}' \
        --variant '{"CLUSTER": true, "BLOCK_K": 256}' --variant '{"CLUSTER": true, "BLOCK_N": 32, "num_warps": 2}' --variant '{"CLUSTER": true, "PDL": null}' --out-file "$OUT/ab-int4-tc-cluster-small-14336x4096.json" 2>&1 | tail -3
      timeout 170 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant '{"CLUSTER": true, "PDL": "wait"}' --variant "{$small, \"SPLIT_K\": 8}" --variant "{$small, \"SPLIT_K\": 8, \"CLUSTER\": true}" \
        --variant "{$small, \"SPLIT_K\": 4, \"CLUSTER\": true}" --variant "{$small, \"SPLIT_K\": 8, \"BLOCK_K\": 256, \"CLUSTER\": true}" --out-file "$OUT/ab-int4-tc-cluster-small-4096x14336.json" 2>&1 | tail -3
      timeout 120 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x4096 --variant '{"CLUSTER": true}' --variant "{$small, \"SPLIT_K\": 8, \"CLUSTER\": true}" \
        --variant "{$small, \"SPLIT_K\": 4, \"CLUSTER\": true}" --variant '{"CLUSTER": true, "BLOCK_N": 32, "num_warps": 2, "SPLIT_K": 4, "maxnreg": null}' --out-file "$OUT/ab-int4-tc-cluster-small-4096x4096.json" 2>&1 | tail -3
      ;;
    stagess1)  # small tensor-core programs streamed through shared memory (STAGES: cp.async, STAGES - 1 steps ahead) unsplit (no split-K fix-up) or lightly split, head to head against the v13 winners, per shape
      small='"BLOCK_N": 16, "num_warps": 1, "BLOCK_K": 128, "X_NOW": false, "maxnreg": null, "PDL": "wait", "PREFETCH": false'
      v() { echo "{$small, $1}"; }
      timeout 200 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 14336x4096 --variant "$(v '"SPLIT_K": 1, "STAGES": 3')" --variant "$(v '"SPLIT_K": 1, "STAGES": 4')" --variant "$(v '"SPLIT_K": 1, "STAGES": 6')" \
        --variant "$(v '"SPLIT_K": 1, "STAGES": 8')" --variant "$(v '"SPLIT_K": 1, "STAGES": 4, "BLOCK_K": 256')" --variant "$(v '"SPLIT_K": 1, "STAGES": 6, "BLOCK_K": 256')" \
        --variant "$(v '"SPLIT_K": 2, "STAGES": 4')" --variant "$(v '"SPLIT_K": 4, "STAGES": 3')" --variant "$(v '"SPLIT_K": 1, "STAGES": 6, "PDL": true')" --out-file "$OUT/ab-int4-tc-stages-small-14336x4096.json" 2>&1 | tail -3
      timeout 150 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x14336 --variant "$(v '"SPLIT_K": 2, "STAGES": 6, "BLOCK_K": 256')" --variant "$(v '"SPLIT_K": 4, "STAGES": 4')" \
        --variant "$(v '"SPLIT_K": 8, "STAGES": 3')" --variant "$(v '"SPLIT_K": 4, "STAGES": 4, "BLOCK_K": 256')" --out-file "$OUT/ab-int4-tc-stages-small-4096x14336.json" 2>&1 | tail -3
      timeout 120 python3 benchmarks/ab_config.py --kernel int4_gemv --shapes 4096x4096 --variant "$(v '"SPLIT_K": 2, "STAGES": 4')" --variant "$(v '"SPLIT_K": 4, "STAGES": 3')" \
        --variant "$(v '"SPLIT_K": 1, "STAGES": 6')" --out-file "$OUT/ab-int4-tc-stages-small-4096x4096.json" 2>&1 | tail -3
      ;;
    arrive)  # (VARIANTS, TAG: env) the arrive-first split-K fix-up (fixup_cost.py arrive: relaxed atomic first, the last arrival polls its siblings' sentinel slots) against the counter fix-up and none, head to head, on the v13 winners and their small-program neighbours, per shape
      tc='"KERNEL": "tc", "num_stages": 1, "PREFETCH": true'
      fc() { timeout 180 python3 benchmarks/fixup_cost.py --shapes "$1" --kernels int4_gemv --variants "${VARIANTS:-count,arrive,none}" --runs 20 --configs "$2" --out-file "$OUT/fixup-cost-${TAG:-arrive}-$1.json" 2>&1 | grep -v "^ " | tail -8; }
      fc 14336x4096 "[{$tc, \"BLOCK_N\": 16, \"BLOCK_K\": 128, \"num_warps\": 1, \"PDL\": \"wait\", \"SPLIT_K\": 4}, {$tc, \"BLOCK_N\": 16, \"BLOCK_K\": 128, \"num_warps\": 1, \"PDL\": \"wait\", \"SPLIT_K\": 8},
        {$tc, \"BLOCK_N\": 16, \"BLOCK_K\": 128, \"num_warps\": 1, \"PDL\": \"wait\", \"SPLIT_K\": 2}, {$tc, \"BLOCK_N\": 32, \"BLOCK_K\": 256, \"num_warps\": 1, \"X_NOW\": true, \"PDL\": \"wait\", \"SPLIT_K\": 4}]"
      fc 4096x14336 "[{$tc, \"BLOCK_N\": 128, \"BLOCK_K\": 256, \"num_warps\": 8, \"X_NOW\": true, \"maxnreg\": 128, \"SPLIT_K\": 8}, {$tc, \"BLOCK_N\": 128, \"BLOCK_K\": 256, \"num_warps\": 8, \"X_NOW\": true, \"maxnreg\": 128, \"SPLIT_K\": 8, \"PDL\": \"wait\"},
        {$tc, \"BLOCK_N\": 16, \"BLOCK_K\": 128, \"num_warps\": 1, \"PDL\": \"wait\", \"SPLIT_K\": 8}, {$tc, \"BLOCK_N\": 32, \"BLOCK_K\": 256, \"num_warps\": 1, \"X_NOW\": true, \"PDL\": \"wait\", \"SPLIT_K\": 8}]"
      fc 4096x4096 "[{$tc, \"BLOCK_N\": 64, \"BLOCK_K\": 128, \"num_warps\": 4, \"maxnreg\": 128, \"PDL\": \"wait\", \"SPLIT_K\": 8}, {$tc, \"BLOCK_N\": 16, \"BLOCK_K\": 128, \"num_warps\": 1, \"PDL\": \"wait\", \"SPLIT_K\": 8},
        {$tc, \"BLOCK_N\": 16, \"BLOCK_K\": 128, \"num_warps\": 1, \"PDL\": \"wait\", \"SPLIT_K\": 4}, {$tc, \"BLOCK_N\": 32, \"BLOCK_K\": 512, \"num_warps\": 2, \"PDL\": \"wait\", \"SPLIT_K\": 4}]"
      ;;
    clusterx)  # (needs benchmarks/experiments/int4-tc-cluster.patch) tc GEMV configs with CLUSTER over block sizes, steps and splits 2-8, at both trigger points, beside the tuned winners (SHAPES)
      timeout 560 python3 benchmarks/explore_gemv.py --shapes "${2:-4096x4096,4096x14336}" --only int4 --int4-configs benchmarks/int4-tc-cluster.json --runs 20 --out-file "$OUT/gemv-explore-tc-cluster.json"
      ;;
    int4rows)  # the int4 GEMV rows at llama-8b shapes with cached tunings (the committed kernel), peers in the same run
      timeout 500 python3 benchmarks/kernels.py --only gemv --gemv-kernels int4_gemv --shapes 8b --runs 30 --out-file "$OUT/kernels-gemv-int4-8b.json" 2>&1 | grep -v "^ "
      ;;
    waitcost)  # the wait fix-up (with the CTA barrier before its reset) against the counter fix-up on the split configs, head to head
      timeout 420 python3 benchmarks/fixup_cost.py --shapes 4096x4096,14336x4096,4096x14336 --kernels int8_gemv@4096x4096,int4_gemv --variants count,wait --runs 20 --out-file "$OUT/fixup-cost-wait.json" 2>&1 | grep -v "^ "
      ;;
    relaxed)  # the int8 (cached tuning) and int4 (tuned afresh, TPE 24 trials) GEMV rows at llama-8b shapes with the relaxed split-K counter reset, peers in the same run
      timeout 560 python3 benchmarks/kernels.py --only gemv --gemv-kernels int8_gemv,int4_gemv --shapes 8b --max-trials 24 --runs 30 --out-file "$OUT/kernels-gemv-relaxed-8b.json" 2>&1 | grep -v "^ "
      ;;
    early)  # (EARLY not kept: apply benchmarks/experiments/int8-early-2d.patch first; the first runs used a 3-D early tile) int8 GEMV EARLY (half the steps read before the PDL wait): GPU numerics, then the int8 rows tuned afresh with EARLY in the space, peers head to head (SHAPES, default 8b)
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "int8" 2>&1 | tail -3
      timeout 470 python3 benchmarks/kernels.py --only gemv --gemv-kernels int8_gemv --shapes "${2:-8b}" --max-trials 100 --runs 30 --peer-compiles 2 --out-file "$OUT/kernels-gemv-int8-early-${2:-8b}.json"
      ;;
    earlyab2)  # (needs benchmarks/experiments/int8-early-2d.patch) EARLY used after the loop: GPU numerics, every int8 config (with and without EARLY) at 4096x4096 and 4096x14336
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "int8" 2>&1 | tail -3
      timeout 420 python3 benchmarks/explore_gemv.py --only int8 --shapes 4096x4096,4096x14336 --runs 20 --out-file "$OUT/gemv-explore-int8-early-${2:-after}.json"
      ;;
    earlyab)  # (needs the EARLY patch, see early) every int8 config at 4096x4096 with and without EARLY (exhaustive), then the int8 rows retuned (TPE timing its whole budget now) with peers
      timeout 200 python3 benchmarks/explore_gemv.py --only int8 --shapes 4096x4096 --runs 20 --out-file "$OUT/gemv-explore-int8-pipe-early.json"
      timeout 380 python3 benchmarks/kernels.py --only gemv --gemv-kernels int8_gemv --shapes "${2:-8b}" --max-trials 100 --runs 30 --peer-compiles 2 --retune --out-file "$OUT/kernels-gemv-int8-early-${2:-8b}.json"
      ;;
    readfloor)  # the read-only floor over llama-8b weight sizes, plain and with PDL (every read before the wait), as a fraction of copy bandwidth
      timeout 450 python3 benchmarks/read_floor.py --sizes 4096x2048,4096x4096,14336x2048 --out-file "$OUT/read-floor-pdl.json"
      ;;
    prewait)  # (W_PREWAIT ran at 4d147e4, not kept) the int8 GEMV's one-step programs reading their weight tile before the PDL wait (W_PREWAIT): GPU numerics, then the int8 rows with cached tunings refined (W_PREWAIT is a refinement)
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "weight_before or chain" 2>&1 | tail -2
      timeout 450 python3 benchmarks/kernels.py --only gemv --gemv-kernels int8_gemv --shapes 1b,4096x4096,14336x4096,4096x14336 --max-trials 100 --runs 30 --refine --out-file "$OUT/kernels-gemv-int8-prewait.json" 2>&1 | grep -v "^  "
      ;;
    prewaitloop)  # (ran at 4d147e4; the W_PREWAIT key is gone since) W_PREWAIT with the next kernel let in after the loop (as the PDL read floor) and without PDL, against the tuned int8 configs
      timeout 250 python3 benchmarks/ab_config.py --kernel int8_gemv --max-trials 30 --shapes 4096x4096,14336x4096,32000x2048,5632x2048 \
        --variant '{"W_PREWAIT": true, "PDL": "loop"}' --variant '{"PDL": "loop"}' --variant '{"W_PREWAIT": true, "PDL": false}' --variant '{"PDL": false}' --out-file "$OUT/ab-int8-prewait-loop.json"
      ;;
    pdlnorms)  # GPU numerics of the norm and gated-MLP kernels (now with PDL), then llama-1b int4 decode end to end with PDL in every Agnitra kernel and Inductor's
      AGNITRA_GPU_TESTS=1 timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 110 tests/test_kernels_norms.py 2>&1 | tail -3
      ro="compile(mode=reduce-overhead)"
      timeout 300 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int4,decode=false) + $ro" --json > "$OUT/bench-llama-1b-int4-pdl-norms.json"
      tail -c 400 "$OUT/bench-llama-1b-int4-pdl-norms.json"
      ;;
    abint8c)  # the int8 GEMV of one step a program reading its weight tile before the PDL wait: GPU numerics (the chain), then one-step configs against the tuned ones, and the tuned without PDL
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_quant.py -k "chain or int8" 2>&1 | tail -2
      timeout 200 python3 benchmarks/ab_config.py --kernel int8_gemv --shapes 256x2048,2048x2048,5632x2048,32000x2048,4096x4096,14336x4096 --variant '{"PDL": false}' \
        --variant '{"BLOCK_N": 1, "BLOCK_K": 2048, "num_warps": 4, "STAGES": 1}' --variant '{"BLOCK_N": 2, "BLOCK_K": 2048, "num_warps": 4, "STAGES": 1}' \
        --variant '{"BLOCK_N": 4, "BLOCK_K": 2048, "num_warps": 4, "STAGES": 1}' --variant '{"BLOCK_N": 2, "BLOCK_K": 4096, "num_warps": 4, "STAGES": 1}' \
        --variant '{"BLOCK_N": 4, "BLOCK_K": 4096, "num_warps": 8, "STAGES": 1}' --out-file "$OUT/ab-int8-one-step-prewait.json"
      ;;
    rows)  # the row-layout int4 GEMV: its compiled loop under this Triton, GPU numerics, its whole space beside read floors and tinygemm
      for c in "rows 64 2 2" "rows 64 2 4 --prefetch" "rows 128 4 2 --prefetch" "words 64 4 2"; do read -r kind bn nw vec more <<< "$c"; python3 benchmarks/sass_loop.py --kernel "$kind" --block-n "$bn" --warps "$nw" --vec "$vec" $more --json "$OUT/sass-loop.jsonl" 2>&1 | tail -1; done
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 140 tests/test_kernels_quant.py -k int4 2>&1 | tail -4
      timeout 420 python3 benchmarks/explore_gemv.py --shapes 8b --only floor,int4 --int4-kernels rows --runs 20 --out-file "$OUT/gemv-explore-int4-rows-8b.json" 2>&1 | grep -v "^  "
      ;;
    maxnreg)  # the row kernel's register cap (occupancy against spills) at llama-8b shapes, prefetching configurations
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 8b --only int4 --int4-kernels rows --int4-where PREFETCH=True --int4-vary maxnreg=0,96,80 --runs 20 --out-file "$OUT/gemv-explore-int4-rows-maxnreg-8b.json" 2>&1 | grep -v "^  "
      ;;
    stages)  # GEMV loops pipelined through shared memory (STAGES): read floors with and without, the row kernel's space crossed with STAGES
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 8b --only floor,int4 --int4-kernels rows --int4-where PREFETCH=False --int4-vary STAGES=1,3,4 --runs 20 --out-file "$OUT/gemv-explore-stages-rows-8b.json" 2>&1 | grep -v "^  "
      ;;
    stages2)  # int8 and the word kernel crossed with STAGES at llama-8b shapes
      timeout 330 python3 benchmarks/explore_gemv.py --shapes 8b --only int8 --int8-vary STAGES=1,3 --runs 20 --out-file "$OUT/gemv-explore-stages-int8-8b.json" 2>&1 | grep -v "^  "
      timeout 230 python3 benchmarks/explore_gemv.py --shapes 8b --only int4 --int4-kernels words --int4-where PREFETCH=False --int4-vary STAGES=1,3 --runs 20 --out-file "$OUT/gemv-explore-stages-words-8b.json" 2>&1 | grep -v "^  "
      ;;
    tma)  # the persistent TMA matmul: GPU numerics, the 4096^3 bf16 space tuned beside cuBLAS, the kernel benchmark's matmul row
      AGNITRA_GPU_TESTS=1 timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 160 tests/test_kernels_matmul.py 2>&1 | tail -6
      timeout 260 python3 -m agnitra.cli tune-matmul --dim 4096 --runs 10 --dtype bf16 --max-trials 80 --device cuda > "$OUT/tune-matmul-4096-bf16.log" 2>&1; tail -14 "$OUT/tune-matmul-4096-bf16.log"
      timeout 90 python3 benchmarks/kernels.py --only matmul --runs 50 --out-file "$OUT/kernels-matmul.json" 2>&1 | tail -3
      [ "${2:-}" = gemv ] && timeout 300 python3 benchmarks/kernels.py --only gemv --shapes 8b,1b --max-trials 100 --runs 30 --out-file "$OUT/kernels-gemv.json" 2>&1 | grep -v "^  "
      ;;
    rounds)  # the matmul's pointer default, its TMA kernel and cuBLAS at 4096^3 bf16, round by round (drift, two speeds)
      timeout 200 python3 benchmarks/matmul_rounds.py --dim 4096 --rounds 10 --runs 10 --out-file "$OUT/matmul-rounds-4096-bf16.json"
      ;;
    stages3)  # int8 at the large-N shapes where torch.compile's int8 leads: deeper streaming
      timeout 300 python3 benchmarks/explore_gemv.py --shapes 32000x2048,128256x4096 --only int8 --int8-vary STAGES=3,4,6 --runs 20 --out-file "$OUT/gemv-explore-stages-int8-large-n.json" 2>&1 | grep -v "^  "
      ;;
    access)  # read rate of int4-sized weights by the bytes a row gets per step (64 B = one group of 128 codes)
      timeout 300 python3 benchmarks/read_access.py --shapes 128256x2048,14336x2048 --runs 10 --out-file "$OUT/read-access.json"
      ;;
    groups)  # the int4 row kernel with steps of several groups (BLOCK_K 256..1024) beside the one-group-a-step winners, llama-1b shapes and 4096^2
      timeout 540 python3 benchmarks/explore_gemv.py --shapes 1b,4096x4096 --only int4 --int4-configs benchmarks/int4-rows-groups.json --runs 20 --out-file "$OUT/gemv-explore-rows-groups.json" 2>&1 | grep -v "^  "
      ;;
    groups8b)  # steps of 2 and 4 groups at llama-8b shapes (where 2 groups a step won 128256x4096)
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 8b --only int4 --int4-configs benchmarks/int4-rows-groups-8b.json --runs 20 --out-file "$OUT/gemv-explore-rows-groups-8b.json" 2>&1 | grep -v "^  "
      ;;
    prefetch2)  # the int4 row kernel prefetching a step's x, scales and zeros too (PREFETCH 2) beside its words only (1), llama-8b shapes
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 90 tests/test_kernels_quant.py -k row_kernel 2>&1 | tail -3
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 8b --only int4 --int4-configs benchmarks/int4-rows-prefetch2.json --int4-vary PREFETCH=1,2 --runs 20 --out-file "$OUT/gemv-explore-rows-prefetch2-8b.json" 2>&1 | grep -v "^  "
      ;;
    prefetch2-1b)  # the same at llama-1b shapes
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 1b --only int4 --int4-configs benchmarks/int4-rows-prefetch2.json --int4-vary PREFETCH=1,2 --runs 20 --out-file "$OUT/gemv-explore-rows-prefetch2-1b.json" 2>&1 | grep -v "^  "
      ;;
    ends)  # the two ends of the int4 row kernel's range: 128256x4096 (83% of copy) and short rows (256x2048, 2048x2048, beside torch.compile's int8)
      timeout 250 python3 benchmarks/explore_gemv.py --shapes 128256x4096 --only int4 --int4-configs benchmarks/int4-rows-ends.json --runs 20 --out-file "$OUT/gemv-explore-rows-ends-128256.json" 2>&1 | grep -v "^  "
      timeout 300 python3 benchmarks/explore_gemv.py --shapes 256x2048,2048x2048 --only int8,int4 --int4-configs benchmarks/int4-rows-ends.json --runs 30 --out-file "$OUT/gemv-explore-rows-ends-short.json" 2>&1 | grep -v "^  "
      ;;
    tc)  # the tensor-core int4 GEMV (pre-shuffled weights, MMAs from inline PTX): GPU numerics, then beside the row kernel's winners, llama-8b and -1b shapes
      AGNITRA_GPU_TESTS=1 timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 110 tests/test_kernels_quant.py -k "tensor_core or tc_ or shuffle" 2>&1 | tail -4
      timeout 290 python3 benchmarks/explore_gemv.py --shapes 8b --only int4 --int4-configs benchmarks/int4-tc.json --runs 20 --out-file "$OUT/gemv-explore-tc-8b.json" 2>&1 | grep -v "^  "
      timeout 230 python3 benchmarks/explore_gemv.py --shapes 1b --only int4 --int4-configs benchmarks/int4-tc.json --runs 20 --out-file "$OUT/gemv-explore-tc-1b.json" 2>&1 | grep -v "^  "
      ;;
    tcstages)  # the tensor-core int4 GEMV streamed through shared memory (STAGES 3, 4) beside its register prefetch, llama-8b and -1b shapes
      AGNITRA_GPU_TESTS=1 timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 90 tests/test_kernels_quant.py -k "tensor_core" 2>&1 | tail -3
      timeout 400 python3 benchmarks/explore_gemv.py --shapes 8b,1b --only int4 --int4-configs benchmarks/int4-tc-stages.json --runs 20 --out-file "$OUT/gemv-explore-tc-stages.json" 2>&1 | grep -v "^  "
      ;;
    tcsplits)  # the tensor-core int4 GEMV with more programs (split-K 16, 32; one-warp programs) at the mid-size llama-8b shapes
      timeout 300 python3 benchmarks/explore_gemv.py --shapes 4096x4096,4096x14336,14336x4096 --only int4 --int4-configs benchmarks/int4-tc-splits.json --runs 20 --out-file "$OUT/gemv-explore-tc-splits.json" 2>&1 | grep -v "^  "
      ;;
    tcreg)  # the tensor-core int4 GEMV with ptxas's register cap raised (maxnreg), which keeps the prefetched loads ahead of the MMAs, beside the uncapped configs; llama-8b shapes
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 8b --only int4 --int4-configs benchmarks/int4-tc-maxnreg.json --runs 20 --out-file "$OUT/gemv-explore-tc-maxnreg-8b.json" 2>&1 | grep -v "^  "
      ;;
    tcreg1b)  # the same at llama-1b shapes
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 1b --only int4 --int4-configs benchmarks/int4-tc-maxnreg.json --runs 20 --out-file "$OUT/gemv-explore-tc-maxnreg-1b.json" 2>&1 | grep -v "^  "
      ;;
    tcdecomp)  # where the tensor-core GEMV's time goes: its loads alone (words; words + x + scales) in its access pattern, the GEMV, the row-major read floor
      timeout 560 python3 benchmarks/tc_decompose.py --runs 20 --out-file "$OUT/tc-decompose.json" 2>&1 | tail -40
      ;;
    stages8)  # the int8 GEMV's loop with loads straight to registers (STAGES 1) beside streamed through shared memory (3), whole space, llama-1b shapes (short rows: often one step)
      timeout 560 python3 benchmarks/explore_gemv.py --shapes 1b --only int8 --int8-vary STAGES=1,3 --runs 20 --out-file "$OUT/gemv-explore-int8-stages-1b.json" 2>&1 | grep -v "^  "
      ;;
    e2e8)  # the int8 kernels' GPU tests (decode layer included), then llama-1b decode end to end: bf16 compile vs int8 through Agnitra's kernels (fused decode layer) under compile + CUDA graphs
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 140 tests/test_kernels_quant.py tests/test_kernels_decode.py -k "int8 or decode" 2>&1 | tail -3
      ro="compile(mode=reduce-overhead)"
      timeout 400 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --json > "$OUT/bench-llama-1b-int8.json"
      tail -c 300 "$OUT/bench-llama-1b-int8.json"
      ;;
    rowsshort)  # the int4 row kernel at llama-1b's short problems (2048x2048: 4.3 us, twice int8's): whole-row and split steps, 1-4 warps, wider than its space
      timeout 500 python3 benchmarks/explore_gemv.py --shapes 2048x2048,256x2048,5632x2048,2048x5632 --only int4 --int4-configs benchmarks/int4-rows-short.json --runs 20 --out-file "$OUT/gemv-explore-rows-short.json" 2>&1 | grep -v "^  "
      ;;
    rowswarps)  # the int4 row kernel with more threads a row (8 warps, VEC 2: 312 instructions a thread at 2 x 2048 against 416) at llama-1b's short problems
      timeout 200 python3 benchmarks/explore_gemv.py --shapes 256x2048,2048x2048 --only int4 --int4-configs benchmarks/int4-rows-warps8.json --runs 20 --out-file "$OUT/gemv-explore-rows-warps8.json" 2>&1 | grep -v "^  "
      ;;
    rowsstages)  # the int4 row kernel's whole-row step through cp.async (STAGES 3, as the int8 GEMV that is 0.3 us faster at 256x2048) or registers, llama-1b's short problems
      timeout 300 python3 benchmarks/explore_gemv.py --shapes 256x2048,2048x2048 --only int4 --int4-configs benchmarks/int4-rows-stages-short.json --int4-vary STAGES=0,3 --runs 20 --out-file "$OUT/gemv-explore-rows-stages-short.json" 2>&1 | grep -v "^  "
      ;;
    inductor8)  # Inductor's own int8 GEMV at the llama-1b shapes where it leads ours: its Triton source and chosen config
      timeout 300 python3 benchmarks/inductor_source.py --shapes 32000x2048,256x2048 --out-dir "$OUT" 2>&1 | tail -120
      ;;
    e2e4peers)  # llama-1b decode end to end under compile + CUDA graphs: bf16, int4 through tinygemm (torch's int4 kernel, the peer), int4 and int8 through Agnitra's kernels
      ro="compile(mode=reduce-overhead)"
      timeout 560 python3 -m agnitra.cli bench zoo:llama-1b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "int4-weight-only + $ro" --recipe "triton-kernels(weights=int4,decode=false) + $ro" --recipe "triton-kernels(weights=int8) + $ro" \
        --json > "$OUT/bench-llama-1b-int4-peers.json"
      tail -c 600 "$OUT/bench-llama-1b-int4-peers.json"
      ;;
    ncusrc)  # where the tensor-core int4 GEMV's warps stall at 4096x14336: per-instruction stall samples (SASS)
      cfg='{"KERNEL": "tc", "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 4, "PREFETCH": true}'
      timeout 200 ncu --clock-control none -k regex:int4_gemv_tc --launch-count 1 --section WarpStateStats --section SourceCounters \
        python3 benchmarks/gemv_once.py --n 4096 --k 14336 --config "$cfg" --launches 1 --no-peer > "$OUT/ncu-gemv-tc-source.txt" 2>&1
      timeout 200 ncu --clock-control none -k regex:int4_gemv_tc --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
        python3 benchmarks/gemv_once.py --n 4096 --k 14336 --config "$cfg" --launches 1 --no-peer > "$OUT/ncu-gemv-tc-sass.csv" 2>&1
      tail -3 "$OUT/ncu-gemv-tc-sass.csv"; grep -A30 "Warp Stall Sampling" "$OUT/ncu-gemv-tc-source.txt" | head -40
      ;;
    ncu)  # hardware counters of the batch-1 int4 GEMVs at 128256x4096 (ours and tinygemm): where the time goes
      ncu_gemv 128256 4096 "$OUT/ncu-gemv-128256.txt" \
        '{"KERNEL": "rows", "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 2, "VEC": 2, "PREFETCH": true}' \
        '{"KERNEL": "words", "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 1}'
      ;;
    ncutc)  # hardware counters of the tensor-core int4 GEMV at a mid-size llama-8b shape (4096x14336: 65% of copy), beside the row kernel and tinygemm
      ncu_gemv 4096 14336 "$OUT/ncu-gemv-tc-4096x14336.txt" \
        '{"KERNEL": "tc", "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 4, "PREFETCH": true}' \
        '{"KERNEL": "rows", "BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 4, "num_warps": 2, "VEC": 2, "PREFETCH": 2}'
      ;;
    inspect)  # issue 3's criterion: time attribution of the llama-1b decode step on the GPU
      timeout 110 python3 -m agnitra.cli inspect zoo:llama-1b --device cuda --out "$OUT/inspect"
      ;;
  esac
} 2>&1 | tee "$OUT/log-$1$(echo "${2:+-$2}" | tr , _).txt"

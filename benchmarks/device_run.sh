#!/usr/bin/env bash
# The GPU runner: one named phase a call, on the device machine (torch 2.11, no registry). Results go
# under $OUT (default /tmp/out) with a log of the phase (log-PHASE.txt); benchmarks/README.md says
# what each phase writes. Every phase fits one 10-minute device command.
#
#   bash benchmarks/device_run.sh profile                      # device ceilings, profile of the llama-1b decode step
#   bash benchmarks/device_run.sh kernels                      # kernel GPU tests, tune-matmul, kernels.py at llama-1b/8b shapes
#   bash benchmarks/device_run.sh gemv SHAPES [TAG]            # the GEMV rows of record: kernels.py --only gemv, tuned exhaustively
#   bash benchmarks/device_run.sh optimize [CASES]             # optimize.py --preset h100 (default case llama-1b-decode-short; OPTIMIZE_FILE, OPTIMIZE_LIMIT)
#   bash benchmarks/device_run.sh gputests                     # the kernels' GPU tests alone
#   bash benchmarks/device_run.sh trust [CASE]                 # the trust tests (TRUST_TESTS=expr), then optimize CASE (default bert-base-b1-short)
#   bash benchmarks/device_run.sh collect K/N                  # the cost model's H100 data: part K of N of `agnitra collect --plan` (COLLECT_S per workload, COLLECT_GENERATED, COLLECT_EXTRA flags, COLLECT_TIMEOUT)
#   bash benchmarks/device_run.sh decoders [SPECS]             # structural triton-kernels GPU test, then decode-step data: zoo:tinylm and COLLECT_GENERATED gen:lm decoders (the llama preset's transforms)
#   bash benchmarks/device_run.sh hf FAMILIES [TAG]            # hf_families.py --optimize FAMILIES (all: twelve) at size moderate, fp16, HF_STRATEGY (default model), HF_BUDGET (170s) each, HF_PEERS, each against a fresh copy of the carried store; HF_LANES=N: N GPUs side by side
#   bash benchmarks/device_run.sh strategies CASE [BUDGET]    # optimize.py CASE with --strategy enumerate and model (STRATEGIES="..."; a carried .devstore.db trains the model), each with cold compile caches
#   bash benchmarks/device_run.sh decode8b                     # llama-8b decode: compile vs Agnitra's int8 kernels vs Inductor's int8
#   bash benchmarks/device_run.sh adversarial [WORKLOADS]        # the runtime and verification tests on the GPU, then adversarial.py (the adversarial zoo on every CUDA runtime; exploring inputs on WORKLOADS)
#   bash benchmarks/device_run.sh layout                       # tinylm-py decode: each weight format with and without the `layout` transform before it (latency, held-out perplexity, energy)
#   bash benchmarks/device_run.sh layoutgates                  # `agnitra layout --l2` on tinylm-py: each mode served by its format's kernel, energy, L2 hit rate (ncu), gates
#   bash benchmarks/device_run.sh curve BUDGETS WORKLOADS [TAG] # budget_curve.py: `agnitra optimize` as a user runs it at each budget, a workload a GPU side by side (CURVE_DEADLINE, default 540 s)
#   bash benchmarks/device_run.sh curve-ppo BUDGETS WORKLOADS [TAG] # the same, each row with the default strategy and with --strategy ppo playing the carried .devagent policy (issue 55)
set -u
if [ -d .whl ]; then  # optuna, plotly: not in the device image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
fi
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1 AGNITRA_CACHE_DIR=/tmp/agnitra-cache HF_HUB_OFFLINE=1
PHASE=${1:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/agnitra-cache
# the tuning cache and ceilings of an earlier machine of the same kind (carry .devcache): no re-tuning
[ -d .devcache ] && cp -r .devcache/. /tmp/agnitra-cache/
save_cache() {
  if [ "$PHASE" = curve-ppo ]; then  # one file: at most 8 come back from a call
    tar czf "$OUT/devcache.tgz" -C /tmp/agnitra-cache tuning ceilings 2>/dev/null; return
  fi
  mkdir -p "$OUT/devcache"; for d in tuning ceilings; do mkdir -p "$OUT/devcache/$d"; cp /tmp/agnitra-cache/$d/*.json "$OUT/devcache/$d/" 2>/dev/null; done; }
trap save_cache EXIT
# optimize.py merges each case into today's result file of the device (committed ones included)
optimize() {  # OPTIMIZE_FILE: another result file than the day's (a re-measurement kept apart)
  timeout "$1" python3 benchmarks/optimize.py --preset h100 --cases "$2" ${OPTIMIZE_FILE:+--out-file "$OPTIMIZE_FILE"}
  cp ${OPTIMIZE_FILE:-benchmarks/results/optimize-*-"$(date +%F)".json} "$OUT/"
  for c in ${2//,/ }; do cp "runs/optimize-$c/candidates.jsonl" "runs/optimize-$c/agnitra.log" "$OUT/" 2>/dev/null; done  # the last case's
}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  case "${1:?phase}" in
    profile)
      python3 -m agnitra.cli device --device cuda --json > "$OUT/device.json"
      timeout 150 python3 -m agnitra.cli profile zoo:llama-1b --device cuda --runs 30 --json > "$OUT/profile-llama-1b.json"
      ;;
    collect)  # a SQLite store of its own under $OUT; the dataset exported even when the time ran out
      export AGNITRA_DB_URL="sqlite:///$OUT/store-${2//\//-of-}.db"
      timeout "${COLLECT_TIMEOUT:-520}" python3 -m agnitra.cli collect --plan --plan-part "${2:?K/N}" --generated "${COLLECT_GENERATED:-20}" --device cuda --sample 24 \
        --budget-per-workload "${COLLECT_S:-60s}" --candidate-timeout 45s ${COLLECT_EXTRA:-} 2>&1 | tail -30
      python3 -m agnitra.cli store export --csv "$OUT/dataset-h100-${2//\//-of-}.csv" --features
      ;;
    decoders)  # the kernels on a half-precision transformers Mistral, then decoders' decode steps into a store of their own
      AGNITRA_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --timeout 140 tests/test_kernels_hf_structure.py > "$OUT/pytest-hf-structure.txt" 2>&1; tail -5 "$OUT/pytest-hf-structure.txt"
      export AGNITRA_DB_URL="sqlite:///$OUT/store-decoders.db"
      if [ -n "${2:-}" ]; then what="${2//,/ } --batch 1"; else what="zoo:tinylm --plan --families lm --no-zoo --generated ${COLLECT_GENERATED:-5}"; fi
      timeout "${COLLECT_TIMEOUT:-450}" python3 -m agnitra.cli collect $what --tokens 32 --device cuda --sample 24 \
        --budget-per-workload "${COLLECT_S:-65s}" --candidate-timeout 45s --transforms fuse-projections,int8-weight-only,triton-kernels,compile 2>&1 | tail -12
      python3 -m agnitra.cli store export --csv "$OUT/dataset-h100-decoders.csv" --features
      ;;
    hf)  # the held-out architectures: the cost model never saw them (the carried store holds our zoo and generated models)
      # HF_BUDGET a family (75 s left no candidate: the baseline and a cold max-autotune peer took it); HF_PEERS: the compile modes compared
      # HF_LANES=N on a machine of N GPUs: family i on GPU i mod N, the lanes side by side (each its own store copy, caches and
      # run folders), merged into one result file; the families must be named (not all)
      lanes=${HF_LANES:-1}; IFS=, read -ra fams <<< "${2:-all}"; parts=()
      for ((i = 0; i < lanes; i++)); do
        mine=(); for ((j = i; j < ${#fams[@]}; j += lanes)); do mine+=("${fams[j]}"); done
        [ ${#mine[@]} -eq 0 ] && continue
        rm -f /tmp/store-$i.db; [ -f .devstore.db ] && cp .devstore.db /tmp/store-$i.db
        part="$OUT/hf-families-${3:-all}$([ "$lanes" -gt 1 ] && echo "-lane$i").json"; parts+=("$part")
        CUDA_VISIBLE_DEVICES=$i AGNITRA_DB_URL=sqlite:////tmp/store-$i.db TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$i TRITON_CACHE_DIR=/tmp/triton-$i \
          timeout "${HF_LIMIT:-570}" python3 benchmarks/hf_families.py --size moderate --device cuda --dtype fp16 --strategy "${HF_STRATEGY:-model}" \
          --families "" --optimize "$(IFS=,; echo "${mine[*]}")" --budget "${HF_BUDGET:-170s}" --peers "${HF_PEERS:-compile,compile-reduce-overhead}" \
          --runs /tmp/hf-runs-$i --out-file "$part" > "$OUT/log-hf-lane$i.txt" 2>&1 &
      done
      wait; tail -n 40 "$OUT"/log-hf-lane*.txt
      [ ${#parts[@]} -gt 1 ] && python3 benchmarks/hf_families.py --merge "${parts[@]}" --out-file "$OUT/hf-families-${3:-all}.json"
      ;;
    strategies)  # the same case searched by enumerate and by the cost model; the store: the carried H100 collection
      [ -f .devstore.db ] && cp .devstore.db /tmp/store.db
      export AGNITRA_DB_URL=sqlite:////tmp/store.db
      # each strategy in a process of its own with Inductor's and Triton's caches empty: neither finds the other's compiles
      n=$(echo ${STRATEGIES:-enumerate model} | wc -w)
      for s in ${STRATEGIES:-enumerate model}; do
        TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$s TRITON_CACHE_DIR=/tmp/triton-$s timeout $((570 / n)) python3 benchmarks/optimize.py --preset h100 --cases "${2:?CASE}" --strategy "$s" --budget "${3:-4m}" --out-file "$OUT/strategies-${2}.json"
      done
      ;;
    kernels)  # the kernels' GPU tests, tune-matmul at 4096^3, the kernel benchmark (tunes what the cache lacks)
      AGNITRA_GPU_TESTS=1 timeout 180 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 170 tests/test_kernels_*.py 2>&1 | tail -15
      timeout 90 python3 -m agnitra.cli tune-matmul --dim 4096 --runs 20 --dtype bf16 --device cuda
      timeout 290 python3 benchmarks/kernels.py --shapes 1b,8b --max-trials 12 --runs 50 --out-file "$OUT/kernels.json"
      ;;
    gemv)  # the file of record for GEMV rows: 8b (llama-8b per projection) or 6144x4096,28672x4096 (after fuse-projections)
      timeout 560 python3 benchmarks/kernels.py --only gemv --shapes "${2:?SHAPES}" --runs 30 --max-trials 128 --out-file "$OUT/kernels-gemv${3:+-$3}.json" 2>&1 | grep -v "^ "
      ;;
    optimize) optimize "${OPTIMIZE_LIMIT:-560}" "${2:-llama-1b-decode-short}" ;;
    gputests)  # the kernels' GPU tests alone
      AGNITRA_GPU_TESTS=1 timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 160 tests/test_kernels_*.py > "$OUT/pytest-kernels.txt" 2>&1; tail -15 "$OUT/pytest-kernels.txt"
      ;;
    trust)  # the trust tests (worker, budgets, verification, cuda-graphs per shape), then optimize within its budget
      python3 -c "import scipy, typer, click, transformers, cloudpickle; print('scipy', scipy.__version__, 'typer', typer.__version__, 'click', click.__version__, 'transformers', transformers.__version__)"
      if [ -n "${TRUST_TESTS:-}" ]; then  # e.g. TRUST_TESTS="not onnxruntime_on_bert"
        AGNITRA_GPU_TESTS=1 timeout 240 python3 -m pytest -q -p no:cacheprovider --timeout 200 -k "$TRUST_TESTS" tests/test_transforms_runtime.py tests/test_verification_verifies.py tests/test_run_safety.py tests/test_model_untouched.py > "$OUT/pytest-trust.txt" 2>&1; tail -25 "$OUT/pytest-trust.txt"
      fi
      optimize "${TRUST_LIMIT:-330}" "${2:-bert-base-b1-short}"
      ;;
    adversarial)  # verification that cannot be fooled, on the GPU: the trust tests, then the adversarial zoo and the exploring inputs' cost
      [ "${ADV_TESTS:-1}" = 0 ] || AGNITRA_GPU_TESTS=1 timeout "${ADV_TESTS_LIMIT:-200}" python3 -m pytest -q -p no:cacheprovider --timeout 190 tests/test_transforms_runtime.py tests/test_verification_verifies.py tests/test_adversarial.py -k "not optimize" > "$OUT/pytest-verification.txt" 2>&1; tail -8 "$OUT/pytest-verification.txt"
      timeout "${ADV_LIMIT:-330}" python3 benchmarks/adversarial.py --device cuda --workloads "${2:-zoo:bert-base@b8,zoo:resnet50@b16}" --out "$OUT/adversarial-gpu.json" 2>&1 | grep -v "^W1\|Warning\|warn"
      ;;
    curve)  # the budget curve: one `agnitra optimize` process a run (CLI defaults, a fresh --out), N GPUs side by side; rows that would end
      # after CURVE_DEADLINE (seconds from the script's start) are skipped; each run against a fresh copy of the carried store, with empty compile caches
      [ -f .devstore.db ] && cp .devstore.db /tmp/store-curve.db && export AGNITRA_DB_URL=sqlite:////tmp/store-curve.db
      timeout "${CURVE_LIMIT:-575}" python3 benchmarks/budget_curve.py --device cuda --budgets "${2:?BUDGETS, e.g. 2m or 2m,5m}" \
        --workloads "${3:?WORKLOADS, e.g. zoo:bert-base@b1,zoo:resnet50@b64,hf:roberta}" --lanes "${CURVE_LANES:-$(nvidia-smi -L | wc -l)}" \
        --deadline-s "${CURVE_DEADLINE:-540}" --runs /tmp/curve-runs --copy-reports "/tmp/curve-reports-${4:-$2}" --out "$OUT/budget-curve-${4:-$2}.json"
      tar czf "$OUT/curve-reports-${4:-$2}.tgz" -C "/tmp/curve-reports-${4:-$2}" . 2>/dev/null  # one file: at most 8 come back from a call
      ;;
    curve-ppo)  # issue 55: as curve, each (budget, workload) once with the CLI's default strategy and once with --strategy ppo, side by side in
      # the order; ppo plays the newest policy of .devagent/agent/<class>/ (carry .devagent), copied into each run's cache. One H200: 1 lane,
      # a 2m row ~1.5-2.3 min of wall, so 2 workloads (4 rows) a 9-minute call. Held out: read off the policy's training workloads (CURVE_HELD_OUT names them instead)
      [ -d .devagent/agent ] || { echo "curve-ppo: carry .devagent (AGNITRA_CACHE_DIR=.devagent agnitra agent train --device-class cuda-sm90 ...)"; exit 2; }
      python3 -c "import stable_baselines3, sb3_contrib, gymnasium" 2>/dev/null && echo "agent extra: present" \
        || echo "agent extra: absent (ppo plays the saved policy with torch alone; where it reaches no recipe, the run notes 'no agent' and goes on in the cost model's order)"
      [ -f .devstore.db ] && cp .devstore.db /tmp/store-curve.db && export AGNITRA_DB_URL=sqlite:////tmp/store-curve.db
      tag=${4:-ppo-${2:?BUDGETS, e.g. 2m}}
      timeout "${CURVE_LIMIT:-575}" python3 benchmarks/budget_curve.py --device cuda --budgets "$2" --strategies default,ppo --agent-dir .devagent \
        --workloads "${3:?WORKLOADS, e.g. zoo:bert-base@b1,hf:vit}" --lanes "${CURVE_LANES:-$(nvidia-smi -L | wc -l)}" ${CURVE_HELD_OUT:+--held-out "$CURVE_HELD_OUT"} \
        --deadline-s "${CURVE_DEADLINE:-540}" --runs /tmp/curve-runs --copy-reports "/tmp/curve-reports-$tag" --out "$OUT/budget-curve-$tag.json"
      tar czf "$OUT/curve-reports-$tag.tgz" -C "/tmp/curve-reports-$tag" . 2>/dev/null  # one file: at most 8 come back from a call
      ;;
    layout)  # the `layout` transform before the weight formats it serves, with their CUDA kernels: tinylm-py (trained) decode, held-out perplexity, energy
      ro="compile(mode=reduce-overhead)"
      for fmt in ${LAYOUT_FORMATS:-"sparsity:2:4|sparsity-2of4" "quant:int4:g32|int4-weight-only(group_size=32)" "quant:int4:g128|int4-weight-only(group_size=128)"}; do
        serves=${fmt%%|*}; step=${fmt#*|}; tag=$(echo "$serves" | tr ':' '-')
        timeout 170 python3 -m agnitra.cli bench zoo:tinylm-py --device cuda --dtype bf16 --no-ops --no-store --variants eager --recipe "$step" \
          --recipe "layout(serves=$serves,solve_seconds=20) + $step" --recipe "$step + $ro" --recipe "layout(serves=$serves,solve_seconds=20) + $step + $ro" \
          --json --debug > "$OUT/bench-layout-tinylm-py-$tag.json" 2> "$OUT/bench-layout-tinylm-py-$tag.err"; echo "$serves: exit $?"
      done
      ;;
    layoutgates)  # agnitra layout: the modes served by their kernels, latency, memory, energy per item, L2 hit rate through ncu, the gates
      python3 - <<'PY' > "$OUT/ncu-sanity.txt" 2>&1  # does ncu read counters here, and does the NVTX filter take push/pop ranges as "name/"?
import subprocess, sys
code = "import torch\nx = torch.randn(4096, 4096, device='cuda')\nx @ x\nwith torch.cuda.nvtx.range('agnitra-l2'):\n    (x @ x).sum()\ntorch.cuda.synchronize()\n"
r = subprocess.run(["ncu", "--clock-control", "none", "--nvtx", "--nvtx-include", "agnitra-l2/", "--metrics", "lts__t_sector_hit_rate.pct,lts__t_sectors.sum", "--csv", "--page", "raw", sys.executable, "-c", code], capture_output=True, text=True)
print(r.returncode); print(r.stdout[-3000:]); print(r.stderr[-2000:])
PY
      for spec in ${LAYOUT_SPECS:-"zoo:tinylm-py|quant:int4:g32|none,once,iterative" "zoo:tinylm-py|sparsity:2:4|none,once,iterative"}; do
        IFS='|' read -r model tf modes <<< "$spec"; tag=$(echo "${model#zoo:}-$tf" | tr ':' '-')
        PYTHONFAULTHANDLER=1 timeout -s ABRT "${LAYOUT_TIMEOUT:-200}" python3 -m agnitra.cli layout "$model" --device cuda --dtype bf16 --transform "$tf" --modes "$modes" --solve-seconds 10 --l2 \
          --out "$OUT/layout-$tag" --json --debug > "$OUT/layout-$tag.json" 2> "$OUT/layout-$tag.err"; echo "$model $tf: exit $?"
      done
      (cd "$OUT" && tar czf layout-runs.tgz layout-* && rm -rf layout-*/ layout-*.json layout-*.err)  # at most 8 files come back
      ;;
    decode8b)  # llama-8b decode (random weights): bf16 compile vs the fused int8 decode kernels vs int8 through Inductor
      ro="compile(mode=reduce-overhead)"
      timeout 380 python3 -m agnitra.cli bench zoo:llama-8b --device cuda --dtype bf16 --seq-len 32 --tokens 128 --no-ops --variants eager \
        --recipe "$ro" --recipe "triton-kernels(weights=int8) + $ro" --recipe "int8-weight-only + $ro" --json > "$OUT/bench-llama-8b-decode.json"
      ;;
    *) echo "unknown phase: $1 (see the head of benchmarks/device_run.sh)"; exit 2 ;;
  esac
} 2>&1 | tee "$OUT/log-$1$(echo "${2:+-$2}" | tr ,/:@ _---).txt"

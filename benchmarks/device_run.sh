#!/usr/bin/env bash
# Runs on the GPU machine (torch 2.11, no registry): PYTHONPATH=src, results under $OUT.
#   bash benchmarks/device_run.sh profile      # device ceilings, profile of the llama-1b decode step
#   bash benchmarks/device_run.sh llama1b      # llama-1b decode peers
#   bash benchmarks/device_run.sh llama8b|bert|resnet|others   # the other peer cases
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 AGNITRA_CACHE_DIR=/tmp/agnitra-cache HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# merged into the committed result file of the day, copied to $OUT after each case group
RESULT=benchmarks/results/peers-nvidia-h100-80gb-hbm3-$(date +%F).json
peers() { timeout "$1" python3 benchmarks/peers.py --preset h100 --cases "$2" --out-file "$RESULT"; cp "$RESULT" "$OUT/"; }
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
  esac
} 2>&1 | tee "$OUT/log-$1.txt"

#!/usr/bin/env bash
# Runs on the GPU machine (torch 2.11, no registry): PYTHONPATH=src, results under $OUT.
#   bash benchmarks/device_run.sh decoders     # device ceilings, profile llama-1b, llama decode peers
#   bash benchmarks/device_run.sh encoders     # bert-base and resnet50 peers
#   bash benchmarks/device_run.sh others       # mamba, whisper-tiny, llama-8b (if not done)
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 AGNITRA_CACHE_DIR=/tmp/agnitra-cache HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
peers() { timeout "$1" python3 benchmarks/peers.py --preset h100 --cases "$2" --out-file "$OUT/peers-h100.json"; }
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  case "${1:-decoders}" in
    decoders)
      python3 -m agnitra.cli device --device cuda --json > "$OUT/device.json"
      timeout 150 python3 -m agnitra.cli profile zoo:llama-1b --device cuda --runs 30 --json > "$OUT/profile-llama-1b.json"
      peers 420 llama-1b-decode
      ;;
    llama8b) peers 560 llama-8b-decode ;;
    encoders) peers 280 bert-base-b1,bert-base-b32; peers 290 resnet50-b1,resnet50-b64 ;;
    others) peers 280 mamba-b1,whisper-tiny-b1 ;;
  esac
} 2>&1 | tee "$OUT/log-${1:-decoders}.txt"

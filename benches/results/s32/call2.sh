#!/usr/bin/env bash
# Session 32, device call 2: a fresh tuning run (measured selection, issue 14 item 4) of the
# benchmark and generality programs with the code of main + change 76 (the records in .mirage/
# were measured on 2026-12-01/02, before changes 33-46 rewrote much of the generated code):
# scripts/tune-pack.sh here, scripts/gpu-tune.sh there (carry [".tune"]). Then, as time allows,
# PyTorch's Qwen3-0.6B decode step (owed from call 1: benches/py/decode_baseline.py).
set -u
t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/gpu-tune.sh 2>&1 | tail -80
echo "== tuning done ($((SECONDS - t0)) s)"
if [ $((SECONDS - t0)) -lt 330 ]; then
  timeout 200 python3 benches/py/decode_baseline.py qwen3-0.6b --pos 512 --json "$OUT/torch-decode-qwen3-0.6b.json" 2>&1 | grep -vE "Warning|warn" | tail -4
fi
echo "== done ($((SECONDS - t0)) s)"

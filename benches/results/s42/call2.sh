#!/usr/bin/env bash
# Session 42, call 2 (the command as run, on the warm machine of call 1): R's Qwen3 and 1B, then
# PyTorch's 1B and Qwen3 steps with a longer limit than call 1 gave them.
TAG=.s42 ARCHIVE=.gpu-s42/a.tar.xz BUDGET=580
. scripts/device-call.sh
decode_run R qwen3-0.6b 512 3; decode_run R llama-3.2-1b 512 3
for m in llama-3.2-1b qwen3-0.6b; do
  timeout 265 python3 benches/py/decode_baseline.py $m --pos 512 --json "$out/a/torch-decode-$m.json" > "$out/a/torch-decode-$m.txt" 2>&1
  echo "torch $m: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-$m.txt" | tail -4 | cut -c1-160
done
pack

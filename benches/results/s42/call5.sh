#!/usr/bin/env bash
# Session 42, call 5 (the command as run): R's Qwen3 and 8B at position 4096, then PyTorch's
# Qwen3 and 1B steps at 4096 (DECODE_MAX_SEQ=4160) while the budget lasted (only Qwen3 did).
TAG=.s42 ARCHIVE=.gpu-s42/a.tar.xz BUDGET=270
. scripts/device-call.sh
decode_run R qwen3-0.6b 4096 1; decode_run R llama-3.1-8b 4096 1
for m in qwen3-0.6b llama-3.2-1b; do
  [ "$(left)" -gt 100 ] || break
  DECODE_MAX_SEQ=4160 timeout $(( $(left) - 15 )) python3 benches/py/decode_baseline.py $m --pos 4096 --json "$out/a/torch-decode-$m-4096.json" > "$out/a/torch-decode-$m-4096.txt" 2>&1
  echo "torch $m 4096: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-$m-4096.txt" | tail -2 | cut -c1-160
done
pack

#!/usr/bin/env bash
# Session 19, device call 5: PyTorch's decode step for Qwen3-0.6B and Llama-3.1-8B at position 512
# beside ours (P = bd0f184, changes 45-47) in the same call.
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/Pbench.tar.xz').extractall('.')"
t0=$SECONDS
log=$OUT/call5.txt
{
for m in qwen3-0.6b llama-3.1-8b; do
  echo "== ours P $m ($((SECONDS-t0)) s)"
  timeout 40 benchP/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|busy|error|panick" | head -4
done
echo "== torch decode ($((SECONDS-t0)) s)"
timeout 230 python3 benches/py/decode_baseline.py qwen3-0.6b llama-3.1-8b --pos 512 --json "$OUT/torch-decode5.json" 2>&1 | grep -vE "Warning|warn" | tail -6
for m in qwen3-0.6b llama-3.1-8b; do
  echo "== ours P $m again ($((SECONDS-t0)) s)"
  timeout 40 benchP/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|error|panick" | head -2
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 5000 "$log"

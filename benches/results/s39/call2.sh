#!/usr/bin/env bash
# Session 39, device call 2: compute-sanitizer memcheck over C's two-layer 1B and Qwen3 (change
# 91), then PyTorch's decode step (decode_baseline.py) for the three models as the time allows. Carry .gpu-s39/c.tar.xz (.s39/decodeC, .s39/mpk_gpu). One archive.
set -u
out=${OUT:-/tmp/s39}
mkdir -p "$out/c2"
t0=$SECONDS
budget=${BUDGET:-580}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s39/c.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c2/gpu.txt"
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 80 ] || { echo "memcheck $m: not run ($(left) s left)"; continue; }
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 1 .s39/decodeC --random $m \
    --layers 2 --tokens 2 --pos 300 > "$out/c2/memcheck-$m.txt" 2>&1
  echo "memcheck $m: exit $? $(grep -E 'ERROR SUMMARY' "$out/c2/memcheck-$m.txt" | head -1) ($((SECONDS - t0)) s)"
done
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  l=$(left); [ "$l" -gt 90 ] || { echo "torch $m: not run ($l s left)"; continue; }
  timeout $((l - 15)) python3 benches/py/decode_baseline.py $m --pos 512 --json "$out/c2/torch-decode-$m.json" > "$out/c2/torch-decode-$m.txt" 2>&1
  echo "torch $m: exit $? ($((SECONDS - t0)) s)"
  grep -vE "Warning|warn" "$out/c2/torch-decode-$m.txt" | tail -5 | cut -c1-160
done
cd "$out" && tar -cJf c2.tar.xz c2 && rm -rf c2

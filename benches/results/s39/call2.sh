#!/usr/bin/env bash
# Session 39, device call 2: change 91's correctness on the device. mpk_gpu of C (every test-mode
# graph step by step against the CPU, the two-layer real-width 1B and Qwen3 decoders), then
# compute-sanitizer memcheck over C's two-layer 1B and Qwen3, then PyTorch's Llama-3.1-8B decode
# step as the time allows. Carry .gpu-s39/c.tar.xz (.s39/decodeC, .s39/mpk_gpu). One archive.
set -u
out=${OUT:-/tmp/s39}
mkdir -p "$out/c2"
t0=$SECONDS
budget=${BUDGET:-580}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s39/c.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c2/gpu.txt"
timeout 330 .s39/mpk_gpu --include-ignored --test-threads=1 --nocapture > "$out/c2/mpk_gpu.txt" 2>&1
echo "mpk_gpu: exit $? $(grep -E '^test result' "$out/c2/mpk_gpu.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E "panicked|FAILED" "$out/c2/mpk_gpu.txt" | head -5 | cut -c1-250
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 80 ] || { echo "memcheck $m: not run ($(left) s left)"; continue; }
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 1 .s39/decodeC --random $m \
    --layers 2 --tokens 2 --pos 300 > "$out/c2/memcheck-$m.txt" 2>&1
  echo "memcheck $m: exit $? $(grep -E 'ERROR SUMMARY' "$out/c2/memcheck-$m.txt" | head -1) ($((SECONDS - t0)) s)"
done
l=$(left)
if [ "$l" -gt 100 ]; then
  timeout $((l - 15)) python3 benches/py/decode_baseline.py llama-3.1-8b --pos 512 --json "$out/c2/torch-decode-llama-3.1-8b.json" > "$out/c2/torch-decode-llama-3.1-8b.txt" 2>&1
  echo "torch 8B: exit $? ($((SECONDS - t0)) s)"
  grep -vE "Warning|warn" "$out/c2/torch-decode-llama-3.1-8b.txt" | tail -5 | cut -c1-160
else
  echo "torch 8B: not run ($l s left)"
fi
cd "$out" && tar -cJf c2.tar.xz c2 && rm -rf c2

#!/usr/bin/env bash
# Session 38, device call 3: what call 1 left of change 89's checks, and a same-call PyTorch
# anchor. (1) mpk_gpu's two-layer test alone (call 1's 150 s bound cut it 2 steps before its
# end), (2) compute-sanitizer memcheck over B's two-layer 1B and Qwen3 (the attention reading q,
# k, v at column offsets of one row), (3) PyTorch's decode step for the 1B beside B's, as the
# time left allows. Carry .gpu-s38/call2.tar.xz. One archive at the end.
set -u
out=${OUT:-/tmp/s38}
mkdir -p "$out/c3"
t0=$SECONDS
budget=${BUDGET:-400}
ok() { [ $((budget - SECONDS + t0)) -gt "$1" ]; }
tar -xJf .gpu-s38/call2.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c3/gpu.txt"
timeout 220 .s38/mpk_gpu --include-ignored --exact two_layers_at_real_model_widths_match_the_cpu --nocapture > "$out/c3/mpk_gpu-two-layers.txt" 2>&1
echo "two layers: exit $? $(grep -E '^test result' "$out/c3/mpk_gpu-two-layers.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -c "matches the CPU reference" "$out/c3/mpk_gpu-two-layers.txt"
grep -E "panicked" "$out/c3/mpk_gpu-two-layers.txt" | head -3 | cut -c1-250
for m in llama-3.2-1b qwen3-0.6b; do
  ok 80 || { echo "memcheck $m: not run (time)"; continue; }
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 1 .s38/decodeB --random $m \
    --layers 2 --tokens 2 --pos 300 > "$out/c3/memcheck-$m.txt" 2>&1
  echo "memcheck $m: exit $? $(grep -E 'ERROR SUMMARY' "$out/c3/memcheck-$m.txt" | head -1) ($((SECONDS - t0)) s)"
done
if ok 100; then
  timeout 50 .s38/decodeB --random llama-3.2-1b --tokens 64 --pos 512 > "$out/c3/decodeB-llama-3.2-1b.txt" 2>&1
  echo "ours B 1B: $(grep -E '^one launch per token|^64 tokens' "$out/c3/decodeB-llama-3.2-1b.txt" | cut -c1-100 | tr '\n' ' ')"
  timeout $((budget - SECONDS + t0 - 10)) python3 benches/py/decode_baseline.py llama-3.2-1b --pos 512 --json "$out/c3/torch-decode-llama-3.2-1b.json" > "$out/c3/torch-decode-llama-3.2-1b.txt" 2>&1
  echo "torch 1B: exit $? ($((SECONDS - t0)) s)"
  grep -vE "Warning|warn" "$out/c3/torch-decode-llama-3.2-1b.txt" | tail -6
else
  echo "PyTorch: not run (time)"
fi
cd "$out" && tar -cJf c3.tar.xz c3 && rm -rf c3

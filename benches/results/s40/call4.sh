#!/usr/bin/env bash
# Session 40, device call 4 (the last ~190 s of device time): change 93 (E, Qwen3's gate/up in
# two steps) on top of change 92 (thread sums): .s40/decodeET + mpk_gpuET, .s40/decodeT (change
# 92 alone). The two-layer real-width test of ET (Qwen3's two-layer megakernel is the one E
# changes), memcheck of its two-layer Qwen3, then Qwen3 T ET T ET at 512.
set -u
out=${OUT:-/tmp/s40}
mkdir -p "$out/c4"
t0=$SECONDS
tar -xJf .gpu-s40/et.tar.xz
timeout 140 .s40/mpk_gpuET --include-ignored --test-threads=1 --nocapture two_layers > "$out/c4/mpk_gpu-ET.txt" 2>&1
echo "mpk_gpu ET two_layers: exit $? $(grep -E '^test result' "$out/c4/mpk_gpu-ET.txt" | tail -1) ($((SECONDS - t0)) s)"
MIRAGE_MPK_WATCHDOG_MS=600000 timeout 30 compute-sanitizer --tool memcheck --error-exitcode 1 .s40/decodeET --random qwen3-0.6b \
  --layers 2 --tokens 2 --pos 300 > "$out/c4/memcheck-ET-qwen3.txt" 2>&1
echo "memcheck ET qwen3: exit $? $(grep -E 'ERROR SUMMARY' "$out/c4/memcheck-ET-qwen3.txt" | head -1) ($((SECONDS - t0)) s)"
for v in T ET T ET; do
  timeout 15 .s40/decode$v --random qwen3-0.6b --tokens 64 --pos 512 > "$out/c4/decode$v-qwen3.$SECONDS.txt" 2>&1
  echo "decode $v qwen3: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/c4/decode$v-qwen3.$SECONDS.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
done

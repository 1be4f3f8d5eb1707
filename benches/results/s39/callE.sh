#!/usr/bin/env bash
# For the next session with a device (not run in session 39): change E (`changeE.patch`: a
# gate/up task of at most 96 KiB — Qwen3-0.6B's alone — walks its loop in 2 steps of 512 rows;
# the 1B's and 8B's megakernels are byte-identical to main's, checked in session 39). Its
# Qwen3 gate/up body is byte-identical to change 91's D, measured 2.4% faster than C (both
# pairs, s39/call1). Build: `git apply benches/results/s39/changeE.patch && MIRAGE_DECODE=1
# cargo build --release --example decode --test mpk_gpu`, then pack .s40/decodeM (main),
# .s40/decodeE and .s40/mpk_gpu (E) into .gpu-s40/e.tar.xz and carry it. Runs: E's mpk_gpu (the
# two-layer Qwen3 at real widths against the CPU reference), memcheck of E's two-layer Qwen3,
# then decode M E M E for Qwen3-0.6B (random weights, 64 tokens, position 512).
set -u
out=${OUT:-/tmp/s40}
mkdir -p "$out/e"
t0=$SECONDS
tar -xJf .gpu-s40/e.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/e/gpu.txt"
timeout 240 .s40/mpk_gpu --include-ignored --test-threads=1 --nocapture > "$out/e/mpk_gpu.txt" 2>&1
echo "mpk_gpu E: exit $? $(grep -E '^test result' "$out/e/mpk_gpu.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E "panicked|FAILED" "$out/e/mpk_gpu.txt" | head -5 | cut -c1-250
MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 .s40/decodeE --random qwen3-0.6b \
  --layers 2 --tokens 2 --pos 300 > "$out/e/memcheck-qwen3-0.6b.txt" 2>&1
echo "memcheck E qwen3: exit $? $(grep -E 'ERROR SUMMARY' "$out/e/memcheck-qwen3-0.6b.txt" | head -1) ($((SECONDS - t0)) s)"
for v in M E M E; do
  timeout 50 .s40/decode$v --random qwen3-0.6b --tokens 64 --pos 512 > "$out/e/decode$v-qwen3-0.6b.txt" 2>&1
  echo "decode $v qwen3: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/e/decode$v-qwen3-0.6b.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
done
cd "$out" && tar -cJf e.tar.xz e && rm -rf e

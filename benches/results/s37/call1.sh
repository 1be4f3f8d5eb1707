#!/usr/bin/env bash
# Session 37, device call 1: change 87 (row reductions of contiguous, 16-byte-aligned rows load
# 16 bytes at a time). A = main before the change (e39f526's code generation), B = with it,
# C = with it and the norm split-K template's combine at 256 threads instead of 128.
# Bundles (each candidate checked against the CPU reference, then timed): s37{A,B,C}n — the 8
# recognized 16-row norm + projection programs, the cache's choice and the model's 6 best
# template candidates; s37{A,B}o — the 6 one-row ones, the cache's choice and the template's
# best; s37{A,B}b — the benchmark's rmsnorm_linear, gqa, qknorm_gqa and ntrans, the cache's
# choice. Then the whole-model decode A/B (1B and Qwen3, position 512, alternated), the quick GPU
# tests of B and mpk_gpu. Carry .gpu-s37/tune.tar.xz (.tune/tune, bundles, decodeA),
# .tune/lib.tar.xz, .gpu-s37/gpu.tar.xz.
set -u
root=$PWD
out=${OUT:-/tmp/s37}
mkdir -p "$out" .tune/lib
tar -xJf .gpu-s37/tune.tar.xz
tar -xJf .tune/lib.tar.xz -C .tune/lib
tar -xJf .gpu-s37/gpu.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$root/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
t0=$SECONDS
for b in s37An s37Bn s37Cn s37Ab s37Bb s37Ao s37Bo; do
  timeout 90 .tune/tune measure .tune/$b --out "$out/$b.json" > "$out/$b.txt" 2> "$out/$b.log"
  echo "$b: exit $? ($((SECONDS - t0)) s)"
  grep -iE "not measured|error|mismatch|skipped" "$out/$b.log" | head -5
done
for m in llama-3.2-1b qwen3-0.6b; do
  for v in A B A B; do
    bin=.tune/decodeA; [ $v = B ] && bin=.gpu/bin/example/decode
    timeout 60 $bin --random $m --tokens 64 --pos 512 > "$out/decode$v-$m.txt" 2>&1
    echo "decode $v $m: exit $? $(grep -E '^one launch per token' "$out/decode$v-$m.txt" | cut -c1-90)"
  done
done
timeout 60 .gpu/bin/example/decode --random llama-3.2-1b --tokens 64 --pos 512 --profile > "$out/decodeB-profile-llama.txt" 2>&1
echo "profile: exit $? ($((SECONDS - t0)) s)"
export MIRAGE_RANDOM_PACK=.gpu/random
python3 -m tarfile -e .gpu/random.tar.xz .gpu 2>/dev/null
run() {
  bin=$(ls .gpu/bin/test/$1-* | head -1)
  timeout $2 "$bin" --include-ignored --test-threads=1 --nocapture > "$out/test-$1.txt" 2>&1
  echo "$1: exit $? $(grep -E '^test result' "$out/test-$1.txt" | tail -1) ($((SECONDS - t0)) s)"
  grep -E "panicked|FAILED|^random programs: |^  (f16|bf16|f32): " "$out/test-$1.txt" | head -8 | cut -c1-250
}
run golden_gpu 60; run random_gpu 40; run mugraph 30; run runtime_gpu 30; run dims_gpu 40
for name in gated_mlp rmsnorm_linear gqa qknorm_gqa ntrans lora; do
  timeout 30 .gpu/bin/example/$name > "$out/ex-$name.txt" 2>&1
  echo "example $name: exit $? $(grep -c '^  output [0-9]*: ' "$out/ex-$name.txt") outputs, $(grep -c MISMATCH "$out/ex-$name.txt") mismatched"
done
run mpk_gpu 150

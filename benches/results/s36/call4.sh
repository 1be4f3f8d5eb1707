#!/usr/bin/env bash
# Session 36, device call 4: change 86 (sums and maxima of wide rows fold into four running
# states). A/B in one call: .tune/s36a (call 1's bundle, the code before) and .tune/s36b (the same
# 16 programs' candidates packed with the change), then rmsnorm_linear_bs1/bs8's cached µGraphs
# before (s36rA) and after (s36rB), alternated twice; compute-sanitizer over the changed template
# kernels; then the quick GPU tests of the tree (golden, coverage, random, #[mugraph], runtime,
# dims, examples) from .gpu-s36/gpu.tar.xz. Carry .tune/tune, .tune/tuneB, .tune/s36a, .tune/s36b,
# .tune/s36rA, .tune/s36rB, .tune/lib.tar.xz, .gpu-s36/gpu.tar.xz.
set -u
root=$PWD
out=${OUT:-/tmp/s36}
mkdir -p "$out" .tune/lib
tar -xJf .tune/lib.tar.xz -C .tune/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$root/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for round in 1 2; do
  for b in s36rA s36rB; do
    tool=.tune/tune; [ "$b" = s36rB ] && tool=.tune/tuneB
    timeout 60 $tool measure .tune/$b --out "$out/$b-$round.json" > "$out/$b-$round.txt" 2> "$out/$b-$round.log"
    echo "$b round $round: exit $? $(grep '^| rmsnorm' "$out/$b-$round.txt" | tail -2 | tr '\n' ' ')"
  done
done
timeout 90 .tune/tune measure .tune/s36a --out "$out/s36a.json" > "$out/s36a.txt" 2> "$out/s36a.log"; echo "s36a: exit $?"
timeout 90 .tune/tuneB measure .tune/s36b --out "$out/s36b.json" > "$out/s36b.txt" 2> "$out/s36b.log"; echo "s36b: exit $?"
grep -A20 '^| program | ok' "$out/s36b.txt" | head -20
TUNE=.tune/tuneB timeout 90 bash scripts/sanitize-bundle.sh .tune/s36b "$out/san" qwen7b_qkv_r16_bf16 2>&1 | tail -4
echo "sanitize: exit $?"
tar -xJf .gpu-s36/gpu.tar.xz
mkdir -p .gpu/lib && tar -xJf .gpu/lib.tar.xz -C .gpu/lib
export LD_LIBRARY_PATH="$root/.gpu/lib:$LD_LIBRARY_PATH"
export MIRAGE_RANDOM_PACK=.gpu/random
python3 -m tarfile -e .gpu/random.tar.xz .gpu 2>/dev/null
t0=$SECONDS
for spec in "golden_gpu 200" "mugraph 100" "runtime_gpu 100" "dims_gpu 100" "random_gpu 200" "mpk_gpu 240"; do
  set -- $spec
  bin=$(ls .gpu/bin/test/$1-* | head -1)
  timeout $2 "$bin" --include-ignored --test-threads=1 --nocapture > "$out/test-$1.txt" 2>&1
  echo "$1: exit $? $(grep -E '^test result' "$out/test-$1.txt" | tail -1) ($((SECONDS - t0)) s)"
  grep -E "panicked|FAILED|^random programs: |^  (f16|bf16|f32): " "$out/test-$1.txt" | head -8 | cut -c1-300
done
for name in gated_mlp rmsnorm_linear gqa qknorm_gqa ntrans lora; do
  timeout 120 .gpu/bin/example/$name > "$out/ex-$name.txt" 2>&1
  echo "example $name: exit $? $(grep -c '^  output [0-9]*: ' "$out/ex-$name.txt") outputs, $(grep -c MISMATCH "$out/ex-$name.txt") mismatched"
done

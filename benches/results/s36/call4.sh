#!/usr/bin/env bash
# Session 36, device call 4 (little device time left: the quick checks first): change 86 (sums
# and maxima of wide rows fold into four running states). The quick GPU tests of the tree
# (golden, coverage, random, #[mugraph], runtime, dims, the examples) from .gpu-s36/gpu.tar.xz;
# then .tune/s36b (call 1's 16 programs' candidates packed with the change; call 1 timed the same
# candidates before it) and rmsnorm_linear_bs1/bs8's cached µGraphs before (s36rA) and after
# (s36rB); then mpk_gpu with what time is left. Carry .gpu-s36/tune.tar.xz (.tune/tune, tuneB,
# s36a, s36b, s36rA, s36rB), .tune/lib.tar.xz, .gpu-s36/gpu.tar.xz.
set -u
root=$PWD
out=${OUT:-/tmp/s36}
mkdir -p "$out" .tune/lib
tar -xJf .gpu-s36/tune.tar.xz
tar -xJf .tune/lib.tar.xz -C .tune/lib
tar -xJf .gpu-s36/gpu.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$root/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MIRAGE_RANDOM_PACK=.gpu/random
python3 -m tarfile -e .gpu/random.tar.xz .gpu 2>/dev/null
t0=$SECONDS
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
timeout 60 .tune/tuneB measure .tune/s36b --out "$out/s36b.json" > "$out/s36b.txt" 2> "$out/s36b.log"; echo "s36b: exit $? ($((SECONDS - t0)) s)"
grep -A18 '^| program | ok' "$out/s36b.txt" | cut -c1-120
for b in s36rA s36rB; do
  tool=.tune/tune; [ "$b" = s36rB ] && tool=.tune/tuneB
  timeout 30 $tool measure .tune/$b --out "$out/$b.json" > "$out/$b.txt" 2> "$out/$b.log"
  echo "$b: exit $? $(grep '^| rmsnorm' "$out/$b.txt" | tail -2 | tr '\n' ' ')"
done
run mpk_gpu 150

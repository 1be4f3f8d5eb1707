#!/usr/bin/env bash
# Session 16, device call 4: change 40 (mma operands in the mma's type packed as bits; A pairs as
# one word for any even k). The GPU tests that run the changed kernels (golden and coverage,
# #[mugraph] launchers, runtime, 320 random programs, sm_80 compile), memcheck and racecheck on
# the coverage and random programs, then the bench cases whose kernels changed, B (2952434) and
# C (this change) alternated, with PyTorch in the same call.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/B.tar.xz").extractall(".")
import os, shutil
b = [f for f in os.listdir(".gpu/bin/test") if f.startswith("gpu-")][0]
os.makedirs("benchB", exist_ok=True); shutil.copy(".gpu/bin/test/" + b, "benchB/gpu")
shutil.rmtree(".gpu")
tarfile.open(".gpu-bundle/C.tar.xz").extractall(".")
PY
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
t0=$SECONDS
log=$OUT/call4.txt
{
echo "== tests of $C"
mkdir -p .gpu/lib && tar -xJf .gpu/lib.tar.xz -C .gpu/lib
export LD_LIBRARY_PATH=$PWD/.gpu/lib
python3 -m tarfile -e .gpu/random.tar.xz .gpu
export MIRAGE_RANDOM_PACK=.gpu/random
tb() { ls .gpu/bin/test/$1-* | head -1; }
for t in golden_gpu mugraph runtime_gpu random_gpu; do
  timeout 200 $(tb $t) --include-ignored --test-threads=1 --nocapture > /tmp/$t.txt 2>&1
  echo "$t exit $? ($((SECONDS-t0)) s): $(grep -E '^test result' /tmp/$t.txt | tail -1)"
  grep -E "FAILED|panicked|MISMATCH|^random programs|^  (f16|bf16|f32): " /tmp/$t.txt | cut -c1-300 | head -12
done
timeout 150 $(tb codegen_compile) --ignored --exact golden_kernels_compile_for_sm80 --test-threads=1 > /tmp/cc.txt 2>&1
echo "codegen_compile sm80 exit $? ($((SECONDS-t0)) s): $(grep -E '^test result' /tmp/cc.txt | tail -1)"
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $(tb golden_gpu) --ignored --exact coverage_kernels_match_the_reference_on_the_gpu --test-threads=1 > /tmp/s.txt 2>&1
  echo "sanitizer $tool coverage exit $?: $(grep -E '(ERROR|RACECHECK) SUMMARY' /tmp/s.txt | tail -1)"
  MIRAGE_RANDOM_LIMIT=60 timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $(tb random_gpu) --ignored --test-threads=1 > /tmp/s.txt 2>&1
  echo "sanitizer $tool random (first 60) exit $?: $(grep -E '(ERROR|RACECHECK) SUMMARY' /tmp/s.txt | tail -1)"
done
CASES="qwen05b_norm_lm_head_r16_bf16 layernorm_linear_bs1 layernorm_linear_bs8 mistral7b_down_resid_r16_bf16 rmsnorm_linear_bs1"
echo "== torch ($((SECONDS-t0)) s)"
timeout 100 python3 .gpu/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch4.json" 2>&1 | tail -6
bench=$(tb gpu)
for v in B C B C; do
  b=$bench; [ $v = B ] && b=benchB/gpu
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 60 "$b" --torch "$OUT/torch4.json" --out "$OUT/ours4-$v" --commit "$C-$v" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|worst|MISMATCH|error" | cut -c1-200 | tail -8
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

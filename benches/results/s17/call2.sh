#!/usr/bin/env bash
# Session 17, device call 2: change 42 (branch s17-barriers: barriers left out between body
# operators whose shared-memory footprints do not conflict). Its golden/coverage GPU test, plain
# and under racecheck, memcheck and synccheck (coverage; golden part 2 of 3 under racecheck),
# then bench cases with norm + projection loops, D (79dc3de, change 41) and E (the branch)
# alternated, PyTorch in the same call.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/E.tar.xz").extractall("benchE")
tarfile.open(".gpu-bundle/D.tar.xz").extractall(".")
PY
D=$(date -u +%F)
t0=$SECONDS
log=$OUT/call2.txt
{
mkdir -p .gpu/lib && tar -xJf .gpu/lib.tar.xz -C .gpu/lib
export LD_LIBRARY_PATH=$PWD/.gpu/lib
g=$(ls benchE/golden_gpu-* | head -1)
echo "== golden_gpu of E ($(cat benchE/COMMIT))"
timeout 150 $g --include-ignored --test-threads=1 > /tmp/g.txt 2>&1
echo "golden_gpu exit $? ($((SECONDS-t0)) s): $(grep -E '^test result' /tmp/g.txt | tail -1)"
grep -E "FAILED|panicked|MISMATCH" /tmp/g.txt | cut -c1-300 | head -8
for tool in racecheck memcheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $g --ignored --exact coverage_kernels_match_the_reference_on_the_gpu --test-threads=1 > /tmp/s.txt 2>&1
  echo "sanitizer $tool coverage exit $?: $(grep -E '(ERROR|RACECHECK) SUMMARY' /tmp/s.txt | tail -1)"
done
MIRAGE_GOLDEN_PART=2/3 timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 $g --ignored --test-threads=1 > /tmp/s.txt 2>&1
echo "sanitizer racecheck golden part 2/3 exit $?: $(grep -E 'RACECHECK SUMMARY' /tmp/s.txt | tail -1) ($((SECONDS-t0)) s)"
CASES="llama1b_norm_lm_head_r1_bf16 qwen05b_norm_lm_head_r1_bf16 mistral7b_norm_lm_head_r1_bf16 llama1b_norm_gated_r1_bf16 mistral7b_norm_qkv_r1_bf16 rmsnorm_linear_bs1 rmsnorm_linear_bs8 gated_mlp_bs1 lm_head_argmax layernorm_linear_bs8"
echo "== torch ($((SECONDS-t0)) s)"
timeout 120 python3 .gpu/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch2.json" 2>&1 | tail -12
for v in D E D E; do
  b=$(ls .gpu/bin/test/gpu-* | head -1); [ $v = E ] && b=$(ls benchE/gpu-* | head -1)
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 80 "$b" --torch "$OUT/torch2.json" --out "$OUT/ours2-$v" --commit "$v" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|MISMATCH|error" | cut -c1-200 | tail -11
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

#!/usr/bin/env bash
# Session 17, device call 1: change 41 (ldmatrix.trans for B tiles whose k is even but not a
# multiple of 16). The whole GPU test suite on D (this change; quick sanitizer), the three decode
# models at position 512, then the bench cases whose kernels changed (and two controls), C
# (e0aea7a, change 40; its bench has the corpus but not the generality set, so the two
# qwen7b_down_r16 cases run on D only) and D alternated, with PyTorch in the same call;
# PyTorch's decode of Qwen3-0.6B if time is left.
set -u
python3 - <<'PY'
import tarfile, os, shutil
tarfile.open(".gpu-bundle/Cbench.tar.xz").extractall("benchC")
tarfile.open(".gpu-bundle/D.tar.xz").extractall(".")
PY
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
t0=$SECONDS
log=$OUT/call1.txt
{
echo "== tests of $C ($(date -u +%T))"
mkdir -p /tmp/runall
OUT=/tmp/runall MIRAGE_BENCH_RUN=0 MIRAGE_DECODE_RUN=0 MIRAGE_SANITIZER_BUDGET_S=120 timeout 330 bash scripts/gpu-run-all.sh > /tmp/runall/run-all.txt 2>&1
echo "gpu-run-all exit $? ($((SECONDS-t0)) s)"
sed -n '/==== summary/,$p' /tmp/runall/run-all.txt | grep -vE "^test .*seed|replay with|DeprecationWarning|warnings.warn" | cut -c1-260 | head -70
tar -cJf "$OUT/runall.tar.xz" -C /tmp runall
export LD_LIBRARY_PATH=$PWD/.gpu/lib
echo "== decode ($((SECONDS-t0)) s)"
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- $m 512"
  timeout 50 .gpu/bin/example/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|waiting|megakernel|error|panick" | head -8
done
CASES_C="qwen05b_norm_lm_head_r16_bf16 mistral7b_down_resid_r16_bf16 rmsnorm_linear_bs1 layernorm_linear_bs8"
CASES="$CASES_C qwen7b_down_r16_bf16 qwen7b_down_r16_f16"
echo "== torch ($((SECONDS-t0)) s)"
timeout 90 python3 .gpu/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch1.json" 2>&1 | tail -8
bench=$(ls .gpu/bin/test/gpu-* | head -1)
for v in C D C D; do
  b=$bench; cases=$CASES; [ $v = C ] && b=$(ls benchC/gpu-* | head -1) && cases=$CASES_C
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 60 "$b" --torch "$OUT/torch1.json" --out "$OUT/ours1-$v" --commit "$C-$v" --date "$D" $cases 2>&1 | grep -E "^\| [a-z]|worst|MISMATCH|error" | cut -c1-200 | tail -8
done
left=$((560 - SECONDS + t0))
echo "== torch decode qwen3-0.6b ($((SECONDS-t0)) s, $left s left)"
[ $left -gt 60 ] && timeout $((left - 10)) python3 .gpu/decode_baseline.py qwen3-0.6b --pos 512 --json "$OUT/torch-decode.json" 2>&1 | tail -6
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

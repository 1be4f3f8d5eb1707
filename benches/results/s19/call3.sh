#!/usr/bin/env bash
# Session 19, device call 3: changes 46 (CUDA-core matmul warps meet at once) and 47 (prefetch
# overlapping the dependency wait). P = binaries of the pack of bd0f184 (changes 45-47), N = 8b5eec9
# (change 45). Decode A/B on Llama-3.2-1B (N P N P), P's per-kind profile on the three models; then
# P's whole GPU test suite with the quick sanitizer in the time left.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/P.tar.xz").extractall(".")
tarfile.open(".gpu-bundle/Nbench.tar.xz").extractall(".")
PY
C=$(cat .gpu/COMMIT)
t0=$SECONDS
log=$OUT/call3.txt
{
echo "== decode A/B ($C)"
for v in N P N P; do
  case $v in N) b=benchN/decode;; P) b=.gpu/bin/example/decode;; esac
  echo "-- $v llama-3.2-1b ($((SECONDS-t0)) s)"
  timeout 40 $b --random llama-3.2-1b --tokens 64 --pos 512 2>&1 | grep -E "ms/token|busy|error|panick" | head -4
done
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- P $m profile ($((SECONDS-t0)) s)"
  timeout 50 .gpu/bin/example/decode --random $m --tokens 64 --pos 512 --profile > "$OUT/decodeP-$m.txt" 2>&1
  grep -E "ms/token|busy|error|panick|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ " "$OUT/decodeP-$m.txt" | head -14
done
left=$((585 - SECONDS + t0))
echo "== tests of P ($((SECONDS-t0)) s, $left s left)"
mkdir -p /tmp/runall
OUT=/tmp/runall MIRAGE_BENCH_RUN=0 MIRAGE_DECODE_RUN=0 MIRAGE_SANITIZER_BUDGET_S=70 timeout $((left - 15)) bash scripts/gpu-run-all.sh > /tmp/runall/run-all.txt 2>&1
echo "gpu-run-all exit $? ($((SECONDS-t0)) s)"
sed -n '/==== summary/,$p' /tmp/runall/run-all.txt | grep -vE "^test .*seed|replay with|DeprecationWarning|warnings.warn" | cut -c1-240 | head -60
tail -5 /tmp/runall/run-all.txt
tar -cJf "$OUT/runall.tar.xz" -C /tmp runall
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

#!/usr/bin/env bash
# Session 20, device call 1: change 48 (decode attention as one operator). Q = the pack of
# change 48, P = session 19's decode binary (bd0f184, changes 45-47). Decode A/B on
# Llama-3.2-1B (P Q P Q), then P and Q with the profile on Qwen3-0.6B and Llama-3.1-8B; the
# two-layer variants against the CPU reference; then Q's whole GPU test suite with the quick
# sanitizer in the time left.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/Q.tar.xz").extractall(".")
tarfile.open(".gpu-bundle/Pbench.tar.xz").extractall(".")
PY
C=$(cat .gpu/COMMIT)
t0=$SECONDS
log=$OUT/call1.txt
Q=.gpu/bin/example/decode
{
echo "== decode A/B ($C)"
for v in P Q P Q; do
  case $v in P) b=benchP/decode;; Q) b=$Q;; esac
  echo "-- $v llama-3.2-1b ($((SECONDS-t0)) s)"
  timeout 40 $b --random llama-3.2-1b --tokens 64 --pos 512 2>&1 | grep -E "ms/token|busy|error|panick" | head -4
done
echo "-- Q llama-3.2-1b profile ($((SECONDS-t0)) s)"
timeout 40 $Q --random llama-3.2-1b --tokens 64 --pos 512 --profile > "$OUT/decodeQ-llama-3.2-1b.txt" 2>&1
grep -E "ms/token|busy|error|panick|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeQ-llama-3.2-1b.txt" | head -30
for m in qwen3-0.6b llama-3.1-8b; do
  echo "-- P $m ($((SECONDS-t0)) s)"
  timeout 60 benchP/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|busy|error|panick" | head -4
  echo "-- Q $m profile ($((SECONDS-t0)) s)"
  timeout 60 $Q --random $m --tokens 64 --pos 512 --profile > "$OUT/decodeQ-$m.txt" 2>&1
  grep -E "ms/token|busy|error|panick|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeQ-$m.txt" | head -30
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- Q $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
  timeout 90 $Q --random $m --layers 2 --tokens 4 --pos 300 --check 4 2>&1 | grep -vE "^\s*$" | tail -5
done
left=$((585 - SECONDS + t0))
echo "== tests of Q ($((SECONDS-t0)) s, $left s left)"
mkdir -p /tmp/runall
OUT=/tmp/runall MIRAGE_BENCH_RUN=0 MIRAGE_DECODE_RUN=0 MIRAGE_SANITIZER_BUDGET_S=60 timeout $((left - 15)) bash scripts/gpu-run-all.sh > /tmp/runall/run-all.txt 2>&1
echo "gpu-run-all exit $? ($((SECONDS-t0)) s)"
sed -n '/==== summary/,$p' /tmp/runall/run-all.txt | grep -vE "^test .*seed|replay with|DeprecationWarning|warnings.warn" | cut -c1-240 | head -60
tail -5 /tmp/runall/run-all.txt
tar -cJf "$OUT/runall.tar.xz" -C /tmp runall
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

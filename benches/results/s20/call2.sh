#!/usr/bin/env bash
# Session 20, device call 2: changes 49 (LM heads at 128 columns) and 50 (q, k, v in one round
# of tasks). R = decode of 48-50, Q = decode of change 48 (call 1). Q R Q R on Llama-3.2-1B, R's
# profile and layer timeline on the three models beside Q, the two-layer variants against the
# CPU reference, and R's prefetch window at 0, 2 and 1 tasks.
set -u
python3 - <<'PY'
import tarfile
for b in ("Qbench", "Rbench"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call2.txt
Q=benchQ/decode; R=benchR/decode
keep="ms/token|busy|error|panick|matches|mismatch|differ"
{
for v in Q R Q R; do
  case $v in Q) b=$Q;; R) b=$R;; esac
  echo "-- $v llama-3.2-1b ($((SECONDS-t0)) s)"
  timeout 40 $b --random llama-3.2-1b --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -4
done
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  if [ $m != llama-3.2-1b ]; then
    echo "-- Q $m ($((SECONDS-t0)) s)"
    timeout 60 $Q --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -4
  fi
  echo "-- R $m profile ($((SECONDS-t0)) s)"
  timeout 60 $R --random $m --tokens 64 --pos 512 --profile > "$OUT/decodeR-$m.txt" 2>&1
  grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeR-$m.txt" | head -30
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- R $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
  timeout 90 $R --random $m --layers 2 --tokens 4 --pos 300 --check 4 2>&1 | grep -E "$keep|step" | head -8
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- R $m prefetch sweep ($((SECONDS-t0)) s)"
  timeout 60 $R --random $m --tokens 64 --pos 512 --prefetch-sweep 0,2,1 2>&1 | grep -iE "$keep|prefetch|ahead" | head -12
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

#!/usr/bin/env bash
# Session 20, device call 3: change 51 (fewer dependent load rounds in the decode attention).
# S = decode of 48-51, R = of 48-50 (call 2). S R S R on Llama-3.2-1B, S's profile on the three
# models beside R, the two-layer variants against the CPU reference, the 8B's prefetch window
# at 0 and 1, the mpk GPU tests of S, and PyTorch's 1B and Qwen3 steps in the same call.
set -u
python3 - <<'PY'
import tarfile
for b in ("Rbench", "Sbench"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call3.txt
R=benchR/decode; S=benchS/decode
keep="ms/token|busy|error|panick|matches|mismatch|differ"
{
for v in S R S R; do
  case $v in R) b=$R;; S) b=$S;; esac
  echo "-- $v llama-3.2-1b ($((SECONDS-t0)) s)"
  timeout 40 $b --random llama-3.2-1b --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -4
done
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  if [ $m != llama-3.2-1b ]; then
    echo "-- R $m ($((SECONDS-t0)) s)"
    timeout 60 $R --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -4
  fi
  sweep=""; [ $m = llama-3.1-8b ] && sweep="--prefetch-sweep 0,1"
  echo "-- S $m profile $sweep ($((SECONDS-t0)) s)"
  timeout 90 $S --random $m --tokens 64 --pos 512 --profile $sweep > "$OUT/decodeS-$m.txt" 2>&1
  grep -E "$keep|prefetch|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeS-$m.txt" | head -32
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- S $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
  timeout 90 $S --random $m --layers 2 --tokens 4 --pos 300 --check 4 2>&1 | grep -E "$keep|step [0-9]:" | head -6
done
echo "-- mpk_gpu tests of S ($((SECONDS-t0)) s)"
timeout 200 benchS/mpk_gpu --include-ignored 2>&1 | grep -E "^test |test result|match|agree|panick" | head -20
left=$((585 - SECONDS + t0))
echo "-- torch decode ($((SECONDS-t0)) s, $left s left)"
for m in llama-3.2-1b qwen3-0.6b; do
  left=$((585 - SECONDS + t0))
  [ $left -gt 60 ] || { echo "torch $m: not run (time)"; continue; }
  echo "-- torch $m ($((SECONDS-t0)) s)"
  timeout $((left - 10)) python3 benches/py/decode_baseline.py $m --pos 512 --json "$OUT/torch-decode3-$m.json" 2>&1 | grep -vE "Warning|warn" | tail -6
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

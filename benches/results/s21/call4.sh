#!/usr/bin/env bash
# Session 21, device call 4: change 56 (one round of gate/up tasks: 8B at 112 columns, Qwen3 at
# 32). X = decode of main with changes 54-56, V = call 2's binary (54 only). 8B and Qwen3 X V X,
# profiles of X; the two-layer 8B and Qwen3 of X against the CPU reference; X at 4096.
set -u
python3 - <<'PY'
import tarfile
for b in ("V", "X"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call4.txt
keep="ms/token|busy|error|panick|matches|mismatch|differ|prefetch ahead"
{
for m in llama-3.1-8b qwen3-0.6b; do
  echo "-- X $m pos 512 profile ($((SECONDS-t0)) s)"
  timeout 100 benchX/decode --random $m --tokens 64 --pos 512 --profile > "$OUT/decodeX-$m-512.txt" 2>&1
  grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeX-$m-512.txt" | head -34
  echo "-- V $m pos 512 ($((SECONDS-t0)) s)"
  timeout 100 benchV/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -3
  echo "-- X $m pos 512 ($((SECONDS-t0)) s)"
  timeout 100 benchX/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -3
done
for m in llama-3.1-8b qwen3-0.6b; do
  echo "-- X $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
  timeout 150 benchX/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > "$OUT/checkX-$m.txt" 2>&1
  echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkX-$m.txt" | head -6
done
for m in llama-3.2-1b llama-3.1-8b qwen3-0.6b; do
  for pos in 512 4096; do
    [ $m = llama-3.2-1b ] || [ $pos = 4096 ] || continue
    left=$((585 - SECONDS + t0)); [ $left -gt 60 ] || { echo "X $m $pos: not run (time)"; continue; }
    echo "-- X $m pos $pos ($((SECONDS-t0)) s)"
    timeout 80 benchX/decode --random $m --tokens 64 --pos $pos 2>&1 | grep -E "$keep" | head -3
  done
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tar -cJf "$OUT/call4-logs.tar.xz" -C "$OUT" $(cd "$OUT" && ls decodeX-*.txt checkX-*.txt) 2>/dev/null
rm -f "$OUT"/decodeX-*.txt "$OUT"/checkX-*.txt
tail -c 12000 "$log"

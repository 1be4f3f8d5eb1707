#!/usr/bin/env bash
# Session 22, device call 1: change 57 (q, k and v tiled by the estimated makespan: 8B q at 32
# columns, k and v at 16). Y = decode of change 57, X = main's decode (changes 54-56, s21 call 4).
# 8B X Y X Y at position 512, Y's profile; Y's two-layer 8B against the CPU reference; Y's
# mpk_gpu tests and memcheck of mpk_toy; Y on the 1B and Qwen3 (tilings unchanged) and at 4096.
set -u
python3 - <<'PY'
import tarfile
for b in ("X", "Y"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call1.txt
keep="ms/token|busy|error|panick|matches|mismatch|differ"
{
echo "-- Y llama-3.1-8b pos 512 profile ($((SECONDS-t0)) s)"
timeout 100 benchY/decode --random llama-3.1-8b --tokens 64 --pos 512 --profile > "$OUT/decodeY-8b-512.txt" 2>&1
grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeY-8b-512.txt" | head -34
for b in X Y X Y; do
  echo "-- $b llama-3.1-8b pos 512 ($((SECONDS-t0)) s)"
  timeout 100 bench$b/decode --random llama-3.1-8b --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -3
done
echo "-- Y llama-3.1-8b 2 layers against the CPU reference ($((SECONDS-t0)) s)"
timeout 150 benchY/decode --random llama-3.1-8b --layers 2 --tokens 3 --pos 300 --check 3 > "$OUT/checkY-8b.txt" 2>&1
echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkY-8b.txt" | head -6
echo "-- mpk_gpu tests of Y ($((SECONDS-t0)) s)"
timeout 200 benchY/mpk_gpu --ignored --test-threads=1 --nocapture > "$OUT/mpk_gpuY.txt" 2>&1
echo "exit $?"; grep -E "^test |test result|match|agree|panick" "$OUT/mpk_gpuY.txt" | head -20
echo "-- memcheck mpk_toy (Y) 8 tokens ($((SECONDS-t0)) s)"
MIRAGE_MPK_WATCHDOG_MS=600000 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 benchY/mpk_toy /tmp/toy.json 8 2>&1 | tail -3
for mp in llama-3.2-1b:512 qwen3-0.6b:512 llama-3.1-8b:4096; do
  m=${mp%%:*}; pos=${mp##*:}
  left=$((585 - SECONDS + t0)); [ $left -gt 60 ] || { echo "Y $m $pos: not run (time)"; continue; }
  echo "-- Y $m pos $pos ($((SECONDS-t0)) s)"
  timeout 80 benchY/decode --random $m --tokens 64 --pos $pos 2>&1 | grep -E "$keep" | head -3
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tar -cJf "$OUT/call1-logs.tar.xz" -C "$OUT" $(cd "$OUT" && ls decodeY-*.txt checkY-*.txt mpk_gpuY.txt) 2>/dev/null
rm -f "$OUT"/decodeY-*.txt "$OUT"/checkY-*.txt "$OUT"/mpk_gpuY.txt
tail -c 12000 "$log"

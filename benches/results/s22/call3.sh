#!/usr/bin/env bash
# Session 22, device call 3: change 58 (no L2 prefetch by default). Z = main's decode, mpk_toy
# and mpk_gpu with the new default. Z's mpk_gpu tests, memcheck and racecheck of mpk_toy; the
# two-layer 1B, Qwen3 and 8B against the CPU reference; the three models at positions 512
# (profile) and 4096; PyTorch's 1B and Qwen3 steps in the same call as time allows.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/Z.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call3.txt
keep="ms/token|busy|error|panick|matches|mismatch|differ|note:"
{
echo "-- mpk_gpu tests of Z ($((SECONDS-t0)) s)"
timeout 200 benchZ/mpk_gpu --ignored --test-threads=1 --nocapture > "$OUT/mpk_gpuZ.txt" 2>&1
echo "exit $?"; grep -E "^test |test result|match|agree|panick" "$OUT/mpk_gpuZ.txt" | head -24
for tool in memcheck racecheck; do
  echo "-- $tool mpk_toy (Z) 8 tokens ($((SECONDS-t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 benchZ/mpk_toy /tmp/toy.json 8 2>&1 | tail -3
done
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- Z $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
  timeout 150 benchZ/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > "$OUT/checkZ-$m.txt" 2>&1
  echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkZ-$m.txt" | head -6
done
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  for pos in 512 4096; do
    prof=""; [ $pos = 512 ] && prof="--profile"
    echo "-- Z $m pos $pos $prof ($((SECONDS-t0)) s)"
    timeout 100 benchZ/decode --random $m --tokens 64 --pos $pos $prof > "$OUT/decodeZ-$m-$pos.txt" 2>&1
    grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeZ-$m-$pos.txt" | head -32
  done
done
for m in llama-3.2-1b qwen3-0.6b; do
  left=$((585 - SECONDS + t0))
  [ $left -gt 150 ] || { echo "torch $m: not run (time)"; continue; }
  echo "-- torch $m ($((SECONDS-t0)) s)"
  timeout $((left - 10)) python3 benches/py/decode_baseline.py $m --pos 512 --json "$OUT/torch-decode3-$m.json" 2>&1 | grep -vE "Warning|warn" | tail -6
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tar -cJf "$OUT/call3-logs.tar.xz" -C "$OUT" $(cd "$OUT" && ls decodeZ-*.txt checkZ-*.txt mpk_gpuZ.txt) 2>/dev/null
rm -f "$OUT"/decodeZ-*.txt "$OUT"/checkZ-*.txt "$OUT"/mpk_gpuZ.txt
tail -c 12000 "$log"

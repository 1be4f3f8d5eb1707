#!/usr/bin/env bash
# Session 21, device call 2: change 54 (change 51 again, with decode_attention __noinline__).
# V = decode of s21-attn (main + 51 + noinline, no L2 fill). The three models at positions 512
# (profile) and 4096; the two-layer variants against the CPU reference; V's mpk_gpu tests;
# memcheck and racecheck of mpk_toy; PyTorch's 1B and Qwen3 steps in the same call.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/V.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call2.txt
V=benchV/decode
keep="ms/token|busy|error|panick|matches|mismatch|differ"
{
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  for pos in 512 4096; do
    prof=""; [ $pos = 512 ] && prof="--profile"
    echo "-- V $m pos $pos $prof ($((SECONDS-t0)) s)"
    timeout 100 $V --random $m --tokens 64 --pos $pos $prof > "$OUT/decodeV-$m-$pos.txt" 2>&1
    grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeV-$m-$pos.txt" | head -32
  done
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- V $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
  timeout 90 $V --random $m --layers 2 --tokens 4 --pos 300 --check 4 > "$OUT/checkV-$m.txt" 2>&1
  echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkV-$m.txt" | head -8
done
echo "-- mpk_gpu tests of V ($((SECONDS-t0)) s)"
timeout 200 benchV/mpk_gpu --ignored --test-threads=1 --nocapture > "$OUT/mpk_gpuV.txt" 2>&1
echo "exit $?"; grep -E "^test |test result|match|agree|panick" "$OUT/mpk_gpuV.txt" | head -20
for tool in memcheck racecheck; do
  echo "-- $tool mpk_toy (V) 8 tokens ($((SECONDS-t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 benchV/mpk_toy /tmp/toy.json 8 2>&1 | tail -3
done
for m in llama-3.2-1b qwen3-0.6b; do
  left=$((585 - SECONDS + t0))
  [ $left -gt 100 ] || { echo "torch $m: not run (time)"; continue; }
  echo "-- torch $m ($((SECONDS-t0)) s)"
  timeout $((left - 10)) python3 benches/py/decode_baseline.py $m --pos 512 --json "$OUT/torch-decode2-$m.json" 2>&1 | grep -vE "Warning|warn" | tail -6
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

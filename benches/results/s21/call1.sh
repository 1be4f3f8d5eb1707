#!/usr/bin/env bash
# Session 21, device call 1: change 53 (the attention fills L2 with the weights after it).
# T = decode of s21-fill (412ebf4), U = T + change 51 again with decode_attention __noinline__.
# Each model: T with a fill sweep (default 32 MiB main run; 0, 16, 32, 48 MiB sweep) and the
# profile; U likewise (0, 32). The two-layer variants of T and U against the CPU reference;
# T's mpk_gpu tests (fill off/whole bit for bit); memcheck of mpk_toy with the fill.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/TU.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call1.txt
{
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- T $m pos 512, fill sweep ($((SECONDS-t0)) s)"
  timeout 120 benchT/decode --random $m --tokens 64 --pos 512 --profile --fill-sweep 0,16,32,48,0 > "$OUT/decodeT-$m.txt" 2>&1
  grep -E "ms/token|busy|error|panick|L2 fill" "$OUT/decodeT-$m.txt" | head -12
  echo "-- U $m pos 512, fill sweep ($((SECONDS-t0)) s)"
  timeout 120 benchU/decode --random $m --tokens 64 --pos 512 --profile --fill-sweep 0,32 > "$OUT/decodeU-$m.txt" 2>&1
  grep -E "ms/token|busy|error|panick|L2 fill" "$OUT/decodeU-$m.txt" | head -8
done
for v in T U; do
  for m in llama-3.2-1b qwen3-0.6b; do
    echo "-- $v $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
    timeout 90 bench$v/decode --random $m --layers 2 --tokens 4 --pos 300 --check 4 2>&1 | grep -vE "^\s*$" | tail -5
  done
done
echo "-- T mpk_gpu ($((SECONDS-t0)) s)"
timeout 200 benchT/mpk_gpu --ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|agree" | head -20
echo "-- memcheck mpk_toy (U) 8 tokens ($((SECONDS-t0)) s)"
MIRAGE_MPK_WATCHDOG_MS=600000 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 benchU/mpk_toy /tmp/toy.json 8 2>&1 | tail -4
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

#!/usr/bin/env bash
# Not run (session 27: no machine could be started; call3.sh holds the whole call). Meant as
# session 27's last device call, for the little device time left after failed starts: call3.sh
# in another order and without session 24's dims group (its memchecks need minutes): first
# mirage-candle's GPU run (scripts/gpu-candle.sh: issue 19 item 6), then change 67 (B against T,
# as call3.sh), as time allows. carry [".gpu-bundle", ".gpu-candle"].
set -u
t0=$SECONDS
budget=${BUDGET:-250}
echo "== candle"
MIRAGE_CANDLE_SANITIZER=${MIRAGE_CANDLE_SANITIZER:-1} timeout 150 bash scripts/gpu-candle.sh > "$OUT/candle.txt" 2>&1
echo "candle exit $?"
grep -E "^test |test result|largest|median|gated part|MLP block|ERROR SUMMARY|commit|differ|error" "$OUT/candle.txt" | tail -30
python3 - <<'PY'
import tarfile
for b in ("T", "B"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
ok() { [ $((budget - SECONDS + t0)) -gt "$1" ]; }
echo "== change 67 ($((SECONDS - t0)) s): T $(cat benchT/COMMIT), B $(cat benchB/COMMIT)"
for m in llama-3.2-1b qwen3-0.6b; do
  ok 30 || { echo "B $m check: not run (time)"; continue; }
  echo "-- B $m 2 layers against the CPU reference ($((SECONDS - t0)) s)"
  timeout 45 benchB/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > "$OUT/checkB-$m.txt" 2>&1
  echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkB-$m.txt" | head -5
done
for m in llama-3.2-1b qwen3-0.6b; do
  for b in T B T B; do
    ok 20 || { echo "$b $m: not run (time)"; continue; }
    echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
    timeout 30 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -2
  done
done
if ok 40; then
  echo "-- memcheck B llama-3.2-1b 2 layers ($((SECONDS - t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 1 \
    benchB/decode --random llama-3.2-1b --layers 2 --tokens 2 --pos 300 > "$OUT/memcheckB.txt" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY" "$OUT/memcheckB.txt" | tail -2
fi
if ok 20; then
  echo "-- B llama-3.2-1b pos 512 profile ($((SECONDS - t0)) s)"
  timeout 30 benchB/decode --random llama-3.2-1b --tokens 64 --pos 512 --profile > "$OUT/decodeB-1b-512.txt" 2>&1
  grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l8" "$OUT/decodeB-1b-512.txt" | head -26
fi
echo "== done ($((SECONDS - t0)) s)"

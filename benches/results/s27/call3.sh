#!/usr/bin/env bash
# Session 27's device call (session 25's call, change 66's Qwen3 profile and change 67):
# session 25's call (s25/call1.sh: session 24's dims group, memcheck, S-sized and bucketed tests,
# split-K over B; then mirage-candle's GPU run), then, as time allows, change 67 (B = the decode
# built with MIRAGE_DECODE_BULK=1: weight tiles stored tile by tile copied by one cp.async.bulk
# each) against T (session 26's build at contiguous_below 64, the default now, same code
# otherwise): B's two-layer 1B and Qwen3 against the CPU reference, then T B T B on the 1B and
# Qwen3 at position 512, memcheck of B's two-layer 1B, T's Qwen3 profile (change 66's shortfall
# there), B's 1B profile.
# Not run in session 27: after call 1 every start of a device machine failed (nine tries, the
# device time spent on them), so run it in a later session. Rebuild T and B from one commit
# (T now = main's default build, B = the same with the knob):
#   for v in T:0 B:1; do b=${v%%:*}
#     MIRAGE_DECODE=1 MIRAGE_DECODE_BULK=${v#*:} cargo build --release --example decode
#     MIRAGE_DECODE=1 MIRAGE_DECODE_BULK=${v#*:} cargo test --release --test mpk_gpu --no-run
#     mkdir bench$b; cp target/release/examples/decode bench$b/
#     cp $(ls -t target/release/deps/mpk_gpu-* | grep -v '\.d$' | head -1) bench$b/mpk_gpu
#     strip bench$b/*; git rev-parse --short=12 HEAD > bench$b/COMMIT
#     mkdir -p .gpu-bundle; tar cJf .gpu-bundle/$b.tar.xz bench$b; rm -rf bench$b
#   done          (about 4-5 min each on two cores)
# Bundles: .gpu-bundle/{dims,T,B}.tar.xz (dims: s24/call1.sh's recipe) and .gpu-candle
# (scripts/candle-pack.sh). carry [".gpu-bundle", ".gpu-candle"]; about 450 s.
set -u
t0=$SECONDS
budget=${BUDGET:-470}
bash benches/results/s25/call1.sh
python3 - <<'PY'
import tarfile
for b in ("T", "B"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
ok() { [ $((budget - SECONDS + t0)) -gt "$1" ]; }
echo "== change 67 ($((SECONDS - t0)) s): T $(cat benchT/COMMIT), B $(cat benchB/COMMIT)"
for m in llama-3.2-1b qwen3-0.6b; do
  ok 40 || { echo "B $m check: not run (time)"; continue; }
  echo "-- B $m 2 layers against the CPU reference ($((SECONDS - t0)) s)"
  timeout 60 benchB/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > "$OUT/checkB-$m.txt" 2>&1
  echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkB-$m.txt" | head -5
done
for m in llama-3.2-1b qwen3-0.6b; do
  for b in T B T B; do
    ok 25 || { echo "$b $m: not run (time)"; continue; }
    echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
    timeout 40 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -2
  done
done
if ok 60; then
  echo "-- memcheck B llama-3.2-1b 2 layers ($((SECONDS - t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 \
    benchB/decode --random llama-3.2-1b --layers 2 --tokens 2 --pos 300 > "$OUT/memcheckB.txt" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY" "$OUT/memcheckB.txt" | tail -2
fi
if ok 25; then
  # Why Qwen3 gained a third of change 66's prediction: where its layer's time goes now.
  echo "-- T qwen3-0.6b pos 512 profile ($((SECONDS - t0)) s)"
  timeout 40 benchT/decode --random qwen3-0.6b --tokens 64 --pos 512 --profile > "$OUT/decodeT-qwen3-512.txt" 2>&1
  grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l14" "$OUT/decodeT-qwen3-512.txt" | head -26
fi
if ok 25; then
  echo "-- B llama-3.2-1b pos 512 profile ($((SECONDS - t0)) s)"
  timeout 40 benchB/decode --random llama-3.2-1b --tokens 64 --pos 512 --profile > "$OUT/decodeB-1b-512.txt" 2>&1
  grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l8" "$OUT/decodeB-1b-512.txt" | head -26
fi
echo "== done ($((SECONDS - t0)) s)"

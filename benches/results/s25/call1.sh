#!/usr/bin/env bash
# Session 25's device call (not run: no device was lent in session 25; run it in a later one):
# session 24's call (benches/results/s24/call1.sh: the dims group with changes 62-63, memcheck,
# the S-sized and bucketed tests, split-K over B) and then mirage-candle's GPU run (change 64:
# scripts/gpu-candle.sh: its GPU tests, the candle_mlp example against candle's own ops, the tests
# under memcheck). About 150 + 60 s.
#
# Bundles (on the build machine, from the repo root): session 24's `.gpu-bundle/dims.tar.xz` (the
# steps in the header of benches/results/s24/call1.sh) and `bash scripts/candle-pack.sh`
# (`.gpu-candle/`). One device call: `bash benches/results/s25/call1.sh` with carry
# [".gpu-bundle", ".gpu-candle"].
set -u
t0=$SECONDS
if [ -f .gpu-bundle/dims.tar.xz ]; then
  bash benches/results/s24/call1.sh
else
  echo "no .gpu-bundle/dims.tar.xz: session 24's part skipped"
fi
echo "== candle ($((SECONDS - t0)) s)"
timeout 240 bash scripts/gpu-candle.sh > "$OUT/candle.txt" 2>&1
echo "candle exit $?"
grep -E "^test |test result|largest|median|gated part|MLP block|ERROR SUMMARY|commit" "$OUT/candle.txt" | tail -30
echo "== done ($((SECONDS - t0)) s)"

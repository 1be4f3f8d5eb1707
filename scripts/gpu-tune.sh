#!/usr/bin/env bash
# The tuning run on the GPU machine (after scripts/tune-pack.sh here, with .tune carried along),
# from the repository root: every packed candidate of every program is run on random inputs and
# compared with the CPU reference interpreter (a failing or mismatching one is skipped, never
# chosen), then timed (CUDA events, L2 flushed before each launch, median of 100 launches per
# round, 3 rounds alternating the candidates' order); each program runs in a process of its own.
# Writes $OUT/tune.json (the record `tune import` reads back here), $OUT/tune.log (progress) and
# $OUT/tune.txt (or .tune/out without $OUT); prints the cost model's calibration and the short
# table last.
#
#   bash scripts/gpu-tune.sh [--only SUBSTRING,...]
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-.tune/out}
mkdir -p "$out"
if [ ! -x .tune/tune ] || [ ! -f .tune/bundle/manifest.json ]; then
  echo "no .tune/tune or .tune/bundle: run scripts/tune-pack.sh first and carry .tune" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
start=$(date +%s)
# libz3, carried by scripts/tune-pack.sh (the GPU machine has none).
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
.tune/tune measure .tune/bundle --out "$out/tune.json" "$@" > "$out/tune.txt" 2> "$out/tune.log"
status=$?
echo "tuning took $(( $(date +%s) - start )) s (exit $status); from $out/tune.log:"
grep -iE "brought|not measured|copy bandwidth|error" "$out/tune.log" | head -20
cat "$out/tune.txt"
exit $status

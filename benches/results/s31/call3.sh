#!/usr/bin/env bash
# Session 31, device call 3: only the sanitizer runs of call2.sh (LV two-layer models). carry [".gpu-bundle"].
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/LV.tar.xz').extractall('.')"
nvidia-smi --query-gpu=name --format=csv,noheader
for tm in memcheck:llama-3.2-1b memcheck:qwen3-0.6b racecheck:qwen3-0.6b; do
  t=${tm%%:*}; m=${tm##*:}
  echo "-- compute-sanitizer $t LV $m 2 layers ($SECONDS s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 80 compute-sanitizer --tool $t --error-exitcode 1 benchLV/decode --random $m \
    --layers 2 --tokens 2 --pos 300 > "$OUT/sanitizer-$t-$m.txt" 2>&1
  echo "exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ms/token" "$OUT/sanitizer-$t-$m.txt" | head -3
done

#!/usr/bin/env bash
# Session 34, device call 8: 40 candidates each of the GQA 8- and 16-row attention programs
# (`tune pack --candidates 40 --only g16_,g8_`, .tune/g16), each checked against the CPU
# reference, then timed; the 16-row case was 0.94x PyTorch with the 12 of call 7.
# Carry .tune/tune, .tune/lib, .tune/g16.
set -u
out=${OUT:-/tmp/s34}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 200 .tune/tune measure .tune/g16 --out "$out/g16.json" > "$out/g16.txt" 2> "$out/g16.log"
echo "ours: exit $?"
grep -iE "not measured|error|mismatch|skipped" "$out/g16.log" | head -10
tail -5 "$out/g16.txt"

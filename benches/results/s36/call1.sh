#!/usr/bin/env bash
# Session 36, device call 1: split-K for normalized projections (search::norm_split). Times the
# packed candidates of .tune/s36a — for each of the 16 recognized bf16 programs of the corpus and
# the generality set, the previous cache choice (found under its old search version) and the
# top 10 norm split-K template candidates by the cost model — each checked against the CPU
# reference. Carry .tune/tune, .tune/s36a, .tune/lib.tar.xz.
set -u
out=${OUT:-/tmp/s36}
mkdir -p "$out" .tune/lib
tar -xJf .tune/lib.tar.xz -C .tune/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 480 .tune/tune measure .tune/s36a --out "$out/s36a.json" > "$out/s36a.txt" 2> "$out/s36a.log"
echo "s36a: exit $?"
grep -iE "not measured|error|mismatch|skipped" "$out/s36a.log" | head -20
cat "$out/s36a.txt" | tail -40

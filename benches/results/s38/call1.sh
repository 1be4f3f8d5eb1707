#!/usr/bin/env bash
# Session 38, device call 1 (rewritten while its first tries found no machine): call2.sh's
# change 89 A/B and megakernel tests first, then session 37's call 4 corpus tuning in the time
# left (12 corpus programs, .tune/s37corp, 34-40 candidates each, packed with 8d27ba8's code;
# every candidate checked against the CPU reference, then timed; PyTorch not run this time).
# Carry .gpu-s37/tune3.tar.xz and .tune/lib.tar.xz; benches/results/s38/call2-bins.tar.xz (the
# decode binaries A and B and mpk_gpu) travels as an untracked file. One archive at the end.
set -u
root=$PWD
out=${OUT:-/tmp/s38}
mkdir -p "$out/c1" .tune/lib .gpu-s38
t0=$SECONDS
cp benches/results/s38/call2-bins.tar.xz .gpu-s38/call2.tar.xz
tar -xJf .gpu-s37/tune3.tar.xz
OUT="$out/c1" bash benches/results/s38/call2.sh
echo "call2 part done ($((SECONDS - t0)) s)"
export LD_LIBRARY_PATH="$root/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
left=$((${CAP:-575} - (SECONDS - t0)))
if [ $left -gt 60 ]; then
  timeout $left .tune/tune measure .tune/s37corp --out "$out/c1/corp.json" > "$out/c1/corp.txt" 2> "$out/c1/corp.log"
  echo "corpus tuning: exit $? ($((SECONDS - t0)) s)"
  grep -iE "not measured|error|mismatch|skipped" "$out/c1/corp.log" | head -10
  grep "model's choice" "$out/c1/corp.log" | head -20
else
  echo "no time left for the corpus tuning ($left s)"
fi
cd "$out" && tar -cJf c1.tar.xz c1 && rm -rf c1

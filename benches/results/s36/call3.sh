#!/usr/bin/env bash
# Session 36, device call 3: the GPU tests of the tree (scripts/gpu-pack.sh, carried compressed
# as .gpu-s36/gpu.tar.xz): golden µGraphs, coverage programs (the new norm_split_k among them),
# #[mugraph] launchers, runtime, random programs, the examples against the CPU reference; no
# benchmark, no decode, a short sanitizer stage.
set -u
out=${OUT:-/tmp/s36}
tar -xJf .gpu-s36/gpu.tar.xz
MIRAGE_BENCH_RUN=0 MIRAGE_DECODE_RUN=0 MIRAGE_SANITIZER_BUDGET_S=60 timeout 540 bash scripts/gpu-run-all.sh > "$out/run-all.txt" 2>&1
echo "gpu-run-all: exit $?"
tail -40 "$out/run-all.txt"

#!/usr/bin/env bash
# Session 34, device call 1: the GPU tests of 17fffac (PDL between a program's kernels, change 81,
# had not been through them), the examples and the default compute-sanitizer stage; no benchmark.
# Packed here with scripts/gpu-pack.sh, then `tar -cf - .gpu | xz > .gpu-s34/gpu.tar.xz`;
# carry [".gpu-s34"].
set -u
t0=$SECONDS
tar -xJf .gpu-s34/gpu.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader
echo "packed $(cat .gpu/COMMIT)"
MIRAGE_BENCH_RUN=0 MIRAGE_SANITIZER_BUDGET_S=150 timeout 560 bash scripts/gpu-run-all.sh
echo "exit $? ($((SECONDS - t0)) s)"

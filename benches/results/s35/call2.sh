#!/usr/bin/env bash
# Session 35, device call 2: the per-SM streaming microbenchmark (stream.cu): plain loads,
# cp.async, 1-D bulk copies and 2-D tensor-map copies, contiguous and as weight-tile strips.
set -u
out=${OUT:-/tmp/s35}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O3 -arch=sm_90a -std=c++17 -o /tmp/stream benches/results/s35/stream.cu -lcuda && /tmp/stream | tee "$out/stream.txt"

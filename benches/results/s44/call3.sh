#!/usr/bin/env bash
# Session 44, call 3: merge.cu with its chain variants (DECISIONS change 100), built here with
# `nvcc -O3 -std=c++17 -arch=sm_90a -o .s44/merge benches/sync/merge.cu`; without and with the
# chunks' K/V loads, twice.
set -u
out=${OUT:-/tmp/s44}
mkdir -p "$out/a"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/a/gpu.txt"
for r in 1 2; do for kv in "" --kv; do timeout 60 .s44/merge 2000 7 $kv | tee "$out/a/merge$kv.$r.txt"; done; done
(cd "$out" && tar -cJf a.tar.xz a && rm -rf a)

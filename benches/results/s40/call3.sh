#!/usr/bin/env bash
# Session 40, device call 3 (same H100, one command line; carry .gpu-s40/t.tar.xz =
# .s40/mpk_gpuT): change 92 alone (T, the code that landed) through the whole mpk_gpu.
tar -xJf .gpu-s40/t.tar.xz; mkdir -p $OUT/c3
timeout 200 .s40/mpk_gpuT --include-ignored --test-threads=1 --nocapture > $OUT/c3/mpk_gpu-T.txt 2>&1
echo "mpk_gpu T exit $? $(grep -E '^test result' $OUT/c3/mpk_gpu-T.txt | tail -1)"
grep -E "panicked|FAILED" $OUT/c3/mpk_gpu-T.txt | head -5 | cut -c1-250

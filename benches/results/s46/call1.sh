#!/usr/bin/env bash
# Session 46, call 1: session 45's prepared call 4, widened. M = main 7a9a103's decode example,
# G3 = change 101 with the merge projection's shuffles and thread sums of a computed tile
# (`MIRAGE_DECODE=1 MIRAGE_DECODE_GROUPED_OUTPUT=1 cargo build --release --example decode --test
# mpk_gpu`; main 514e343 differs from it only by behaviour-neutral cleanups), both from
# .gpu-s45/e.tar.xz. G3's test graphs against the CPU first, then M and G3 alternated twice on
# Qwen3 and the 1B (position 512), the 8B once, a --profile run each on Qwen3, memcheck and
# racecheck of G3's two-layer Qwen3.
TAG=.s45 ARCHIVE=.gpu-s45/e.tar.xz BUDGET=${BUDGET:-480}
. scripts/device-call.sh
timeout 100 .s45/mpk_gpuG3 --include-ignored --test-threads=1 --nocapture every_test_graph > "$out/a/mpk_gpu-G3.txt" 2>&1
echo "mpk_gpu G3: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G3.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED' "$out/a/mpk_gpu-G3.txt" | head -3 | cut -c1-300
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M G3; do decode_run $v $m 512 $r; done; done; done
for v in M G3; do [ "$(left)" -gt 220 ] && decode_run $v llama-3.1-8b 512 1; done
for v in M G3; do [ "$(left)" -gt 150 ] && decode_run $v qwen3-0.6b 512 p --profile; done
[ "$(left)" -gt 50 ] && sanitize_run memcheck G3 45
[ "$(left)" -gt 60 ] && sanitize_run racecheck G3 $(( $(left) - 10 ))
pack

#!/usr/bin/env bash
# Session 43, call 1 (prepared in session 42 as s42/next-call.sh; binaries built as its head said).
# Runs: the level microbenchmark (DECISIONS change 98: counter, counter-spin, counter-window,
# flagged at N = 1024, 2048, 3072, alone and with a projection per level); the megakernel's
# overhead test (dispatch, hop, fan-in) with change N, beside the microbenchmark's counter
# level; then main (M) against change N (the workers' waits without the 32 ns sleeps) on Qwen3
# and the 1B, alternated twice with --profile; N's mpk_gpu if the budget allows.
TAG=.s43 ARCHIVE=.gpu-s43/a.tar.xz
. scripts/device-call.sh
for n in 1024 2048 3072; do for g in "" --gemv; do timeout 60 .s43/level $n 2000 7 $g | tee "$out/a/level-$n$g.txt"; done; done
timeout 60 .s43/mpk_gpuN --include-ignored --nocapture overhead > "$out/a/overhead-N.txt" 2>&1
echo "overhead N: exit $?"; grep -E '^overhead_' "$out/a/overhead-N.txt"
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M N; do decode_run $v $m 512 $r --profile; done; done; done
[ "$(left)" -gt 170 ] && { timeout 160 .s43/mpk_gpuN --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-N.txt" 2>&1
  echo "mpk_gpu N: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-N.txt" | tail -1) ($((SECONDS - t0)) s)"; }
pack

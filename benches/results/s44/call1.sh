#!/usr/bin/env bash
# Session 44, call 1: session 43's call 3 with a full budget (binaries built in session 43 as
# benches/results/s43/README.md says; main has changed only in comments since). The level
# microbenchmark with its new variants (flagged-backoff, hybrid; DECISIONS change 98), then change
# 99 (T: the angle table) against main (M) alternated on Qwen3 and the 1B (twice, --profile) and
# the 8B (once); T's mpk_gpu; memcheck and racecheck of T's two-layer Qwen3 as the budget allows.
TAG=.s43 ARCHIVE=.gpu-s43/c.tar.xz BUDGET=${BUDGET:-570}
. scripts/device-call.sh
for n in 1024 3072; do for g in "" --gemv; do timeout 30 .s43/level $n 2000 5 $g | tee "$out/a/level2-$n$g.txt"; done; done
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M T; do decode_run $v $m 512 $r --profile; done; done; done
for v in M T; do [ "$(left)" -gt 200 ] && decode_run $v llama-3.1-8b 512 1; done
[ "$(left)" -gt 150 ] && { timeout 145 .s43/mpk_gpuT --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-T.txt" 2>&1
  echo "mpk_gpu T: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-T.txt" | tail -1) ($((SECONDS - t0)) s)"
  grep -E 'panicked|FAILED' "$out/a/mpk_gpu-T.txt" | head -3 | cut -c1-200; }
[ "$(left)" -gt 40 ] && sanitize_run memcheck T 40
[ "$(left)" -gt 60 ] && sanitize_run racecheck T $(( $(left) - 10 ))
pack

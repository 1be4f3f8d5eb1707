#!/usr/bin/env bash
# Session 42, call 4. Binaries built here: R = main 1b2c97c (change 95; call 1's decodeR),
# P1 = R + change 96 with relaxed polls and a fence, P2 = R + change 96 with acquire polls,
# Q = R + change 97 (the scores in partial sums); P1's and Q's mpk_gpu. Qwen3 and the 1B alternated
# twice at 512 with --profile; then P1's whole mpk_gpu, the 8B with R and P1, Q's mpk_gpu, and memcheck of the
# best variant's two-layer Qwen3 if the budget allows.
TAG=.s42 ARCHIVE=.gpu-s42/b.tar.xz
. scripts/device-call.sh
tar -xJf .gpu-s42/a.tar.xz .s42/decodeR
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in R P1 P2 Q; do decode_run $v $m 512 $r --profile; done; done; done
[ "$(left)" -gt 170 ] && { timeout 160 .s42/mpk_gpuP1 --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-P1.txt" 2>&1
  echo "mpk_gpu P1: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-P1.txt" | tail -1) ($((SECONDS - t0)) s)"
  grep -E 'panicked|FAILED' "$out/a/mpk_gpu-P1.txt" | head -3 | cut -c1-200; }
for v in R P1; do [ "$(left)" -gt 45 ] && decode_run $v llama-3.1-8b 512 1; done
[ "$(left)" -gt 240 ] && { timeout 160 .s42/mpk_gpuQ --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-Q.txt" 2>&1
  echo "mpk_gpu Q: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-Q.txt" | tail -1) ($((SECONDS - t0)) s)"
  grep -E 'panicked|FAILED' "$out/a/mpk_gpu-Q.txt" | head -3 | cut -c1-200; }
for v in P1 Q; do
  [ "$(left)" -gt 40 ] || break
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 35 compute-sanitizer --tool memcheck --error-exitcode 1 .s42/decode$v --random qwen3-0.6b --layers 2 --tokens 2 --pos 300 > "$out/a/memcheck-$v.txt" 2>&1
  echo "memcheck $v: exit $? $(grep -E 'SUMMARY' "$out/a/memcheck-$v.txt" | head -1) ($((SECONDS - t0)) s)"
done
pack

#!/usr/bin/env bash
# Session 45, call 2: change 101 (the output projection by KV head group, DECISIONS 101). M =
# main 7a9a103's decode example (as in call 1), G = branch s45-group's with
# MIRAGE_DECODE=1 MIRAGE_DECODE_GROUPED_OUTPUT=1 (`cargo build --release --example decode --test
# mpk_gpu`), its mpk_gpu test binary (every test graph incl. layer_grouped and
# layer_grouped_qk_norm, and the two-layer real-width 1B and Qwen3, grouped, against the CPU).
# G's mpk_gpu first, then M and G alternated twice on Qwen3 and the 1B (position 512), the 8B
# once, one --profile run each on Qwen3, memcheck and racecheck of G's two-layer Qwen3.
TAG=.s45 ARCHIVE=.gpu-s45/c.tar.xz BUDGET=${BUDGET:-570}
. scripts/device-call.sh
timeout 170 .s45/mpk_gpuG --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-G.txt" 2>&1
echo "mpk_gpu G: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED' "$out/a/mpk_gpu-G.txt" | head -3 | cut -c1-300
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M G; do decode_run $v $m 512 $r; done; done; done
for v in M G; do [ "$(left)" -gt 220 ] && decode_run $v llama-3.1-8b 512 1; done
for v in M G; do [ "$(left)" -gt 150 ] && decode_run $v qwen3-0.6b 512 p --profile; done
[ "$(left)" -gt 50 ] && sanitize_run memcheck G 45
[ "$(left)" -gt 60 ] && sanitize_run racecheck G $(( $(left) - 10 ))
pack

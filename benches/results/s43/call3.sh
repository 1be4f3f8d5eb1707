#!/usr/bin/env bash
# Session 43, call 3 (trimmed to the device time left after repeated refused starts): the level
# microbenchmark with its two new variants (flagged-backoff, hybrid; DECISIONS change 98), then
# change 99 (T: the angle table) against main (M), alternated on Qwen3 (twice) and the 1B with
# --profile; T's mpk_gpu in what is left.
TAG=.s43 ARCHIVE=.gpu-s43/c.tar.xz BUDGET=${BUDGET:-200}
. scripts/device-call.sh
for n in 1024 3072; do for g in "" --gemv; do timeout 30 .s43/level $n 2000 5 $g | tee "$out/a/level2-$n$g.txt"; done; done
for r in 1 2; do for v in M T; do decode_run $v qwen3-0.6b 512 $r --profile; done; done
for v in M T; do decode_run $v llama-3.2-1b 512 1 --profile; done
timeout $(( $(left) > 20 ? $(left) - 5 : 15 )) .s43/mpk_gpuT --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-T.txt" 2>&1
echo "mpk_gpu T: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-T.txt" | tail -1) $(grep -cE '^test .* ok$' "$out/a/mpk_gpu-T.txt") ok ($((SECONDS - t0)) s)"
grep -E '^test ' "$out/a/mpk_gpu-T.txt"
pack

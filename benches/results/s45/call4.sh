#!/usr/bin/env bash
# Session 45, call 4 (the session's last ~300 s of device time): change 101 with the merge
# projection's shuffles (G2's) and thread sums of a computed in-loop tile (the gate/up's
# x + Σ P: branch s45-tsum), G3, built as call 2's G, against main (M, as in calls 1-3):
# alternated on Qwen3 (twice) and the 1B (once), then G3's test graphs against the CPU (the
# grouped layers' gate/up takes the new thread sum).
TAG=.s45 ARCHIVE=.gpu-s45/e.tar.xz BUDGET=${BUDGET:-150}
. scripts/device-call.sh
for r in 1 2; do for v in M G3; do decode_run $v qwen3-0.6b 512 $r; done; done
for v in M G3; do decode_run $v llama-3.2-1b 512 1; done
timeout $(( $(left) > 20 ? $(left) : 20 )) .s45/mpk_gpuG3 --include-ignored --test-threads=1 --nocapture every_test_graph > "$out/a/mpk_gpu-G3.txt" 2>&1
echo "mpk_gpu G3: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G3.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED|layer_grouped' "$out/a/mpk_gpu-G3.txt" | head -4 | cut -c1-300
pack

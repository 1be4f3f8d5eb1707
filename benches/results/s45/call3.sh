#!/usr/bin/env bash
# Session 45, call 3: change 101 with the merge projection's row groups meeting by shuffles
# (G2, branch s45-group as committed after call 2, built as call 2's G) against main (M, as in
# calls 1 and 2): alternated twice on Qwen3 and the 1B, the 8B once, G2's Qwen3 profile; G2's
# mpk_gpu (the test graphs incl. the grouped layers, then the two-layer real-width models);
# memcheck of G2's two-layer Qwen3.
TAG=.s45 ARCHIVE=.gpu-s45/d.tar.xz BUDGET=${BUDGET:-430}
. scripts/device-call.sh
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M G2; do decode_run $v $m 512 $r; done; done; done
for v in M G2; do [ "$(left)" -gt 330 ] && decode_run $v llama-3.1-8b 512 1; done
decode_run G2 qwen3-0.6b 512 p --profile
timeout $(( $(left) - 60 )) .s45/mpk_gpuG2 --include-ignored --test-threads=1 --nocapture every_test_graph two_layers > "$out/a/mpk_gpu-G2.txt" 2>&1
echo "mpk_gpu G2: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G2.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED|layer_grouped' "$out/a/mpk_gpu-G2.txt" | head -4 | cut -c1-300
[ "$(left)" -gt 45 ] && sanitize_run memcheck G2 40
pack

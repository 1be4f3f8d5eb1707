#!/usr/bin/env bash
# Session 46, call 3: call 2 (never completed: the machine was taken back mid-call) cut to the
# ~300 s of device time left. M (from .gpu-s45/e.tar.xz) against G4 (change 102 with
# MIRAGE_DECODE_GROUPED_OUTPUT=1, .gpu-s46/b.tar.xz): G4's test graphs against the CPU, M and
# G4 alternated twice on Qwen3 and the 1B (position 512), memcheck of G4's two-layer Qwen3,
# its two-layer real-width models (45 s), the 8B once each and racecheck if time is left.
TAG=.s45 ARCHIVE=.gpu-s45/e.tar.xz BUDGET=${BUDGET:-270}
. scripts/device-call.sh
tar -xJf .gpu-s46/b.tar.xz
cp .s46/decodeG4 .s45/decodeG4
timeout 40 .s46/mpk_gpuG4 --include-ignored --test-threads=1 --nocapture every_test_graph > "$out/a/mpk_gpu-G4.txt" 2>&1
echo "mpk_gpu G4 test graphs: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G4.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED' "$out/a/mpk_gpu-G4.txt" | head -3 | cut -c1-300
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M G4; do decode_run $v $m 512 $r; done; done; done
sanitize_run memcheck G4 30
timeout 45 .s46/mpk_gpuG4 --include-ignored --test-threads=1 --nocapture two_layers > "$out/a/mpk_gpu-G4-real.txt" 2>&1
echo "mpk_gpu G4 two layers: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G4-real.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED|position|pos' "$out/a/mpk_gpu-G4-real.txt" | head -4 | cut -c1-300
[ "$(left)" -gt 40 ] && decode_run G4 qwen3-0.6b 512 p --profile
for v in M G4; do [ "$(left)" -gt 45 ] && decode_run $v llama-3.1-8b 512 1; done
[ "$(left)" -gt 40 ] && sanitize_run racecheck G4 $(( $(left) - 5 ))
pack

#!/usr/bin/env bash
# Session 46, call 2: change 102 (a short leading sum heads the element-wise pass: the grouped
# gate/up in two barriers an iteration). M and G3 as in call 1 (from .gpu-s45/e.tar.xz), G4 =
# main with change 102, `MIRAGE_DECODE=1 MIRAGE_DECODE_GROUPED_OUTPUT=1 cargo build --release
# --example decode --test mpk_gpu` (.gpu-s46/b.tar.xz). G4's test graphs against the CPU, then
# its two-layer real-width models (90 s), M, G3 and G4 alternated twice on Qwen3 and the 1B and
# once on the 8B (position 512), --profile runs, memcheck and racecheck of G4's two-layer Qwen3.
TAG=.s45 ARCHIVE=.gpu-s45/e.tar.xz BUDGET=${BUDGET:-500}
. scripts/device-call.sh
tar -xJf .gpu-s46/b.tar.xz
timeout 60 .s46/mpk_gpuG4 --include-ignored --test-threads=1 --nocapture every_test_graph > "$out/a/mpk_gpu-G4.txt" 2>&1
echo "mpk_gpu G4 test graphs: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G4.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED' "$out/a/mpk_gpu-G4.txt" | head -3 | cut -c1-300
timeout 90 .s46/mpk_gpuG4 --include-ignored --test-threads=1 --nocapture two_layers > "$out/a/mpk_gpu-G4-real.txt" 2>&1
echo "mpk_gpu G4 two layers: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-G4-real.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED' "$out/a/mpk_gpu-G4-real.txt" | head -3 | cut -c1-300
cp .s46/decodeG4 .s45/decodeG4
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M G3 G4; do decode_run $v $m 512 $r; done; done; done
for v in M G4 G3; do [ "$(left)" -gt 200 ] && decode_run $v llama-3.1-8b 512 1; done
[ "$(left)" -gt 120 ] && decode_run G4 qwen3-0.6b 512 p --profile
for v in M G4; do [ "$(left)" -gt 100 ] && decode_run $v llama-3.2-1b 512 p --profile; done
[ "$(left)" -gt 50 ] && sanitize_run memcheck G4 45
[ "$(left)" -gt 60 ] && sanitize_run racecheck G4 $(( $(left) - 10 ))
pack

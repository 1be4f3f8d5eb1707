#!/usr/bin/env bash
# Session 41, call 1. Binaries built here (see benches/results/s41/README.md): T = main 645a9bb
# (change 92), ET = T + change 93 (benches/results/s39/changeE.patch), A = T with the attention
# phase stamps of .s41/ax.py (layer 14 of Qwen3, layer 8 of the 1B, steps 40-41), F = T with the
# ticket taken as a grid barrier does (.s41/vx.py F), S = T with float sincosf angles (vx.py S,
# an upper bound only), K = T + change 94 (branch s41-early: the chunk's first cached rows copied
# into shared memory with the first round of loads). Runs in priority order while the budget allows; one archive at the end.
set -u
out=${OUT:-/tmp/s41}
mkdir -p "$out/a"
t0=$SECONDS
budget=${BUDGET:-540}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s41/a.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/a/gpu.txt"
for m in qwen3-0.6b llama-3.2-1b; do
  timeout 60 .s41/decodeA --random $m --tokens 64 --pos 512 > "$out/a/phases-$m.txt" 2>&1
  echo "phases $m: exit $? $(grep -c '^ATT' "$out/a/phases-$m.txt") lines ($((SECONDS - t0)) s)"
done
run() {  # variant model pos round
  timeout 120 .s41/decode$1 --random $2 --tokens 64 --pos $3 > "$out/a/decode$1-$2-$3.$4.txt" 2>&1
  echo "decode $1 $2 @$3: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/a/decode$1-$2-$3.$4.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
}
for v in T ET F S K; do run $v qwen3-0.6b 512 1; done
for v in T K F S; do run $v llama-3.2-1b 512 1; done
for v in T K ET; do run $v qwen3-0.6b 512 2; done
[ "$(left)" -gt 140 ] && timeout 140 .s41/mpk_gpuK --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-K.txt" 2>&1
echo "mpk_gpu K: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-K.txt" | tail -1) ($((SECONDS - t0)) s)"; grep -E 'panicked|FAILED' "$out/a/mpk_gpu-K.txt" | head -3 | cut -c1-200
for m in qwen3-0.6b; do
  [ "$(left)" -gt 80 ] || break
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 .s41/decodeK --random $m --layers 2 --tokens 2 --pos 300 > "$out/a/racecheck-K-$m.txt" 2>&1
  echo "racecheck K $m: exit $? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/a/racecheck-K-$m.txt" | head -1) ($((SECONDS - t0)) s)"
done
[ "$(left)" -gt 60 ] && for v in K T; do run $v llama-3.2-1b 512 2; done
[ "$(left)" -gt 150 ] && timeout 140 .s41/mpk_gpuET --include-ignored --test-threads=1 --nocapture two_layers > "$out/a/mpk_gpu-ET.txt" 2>&1
echo "mpk_gpu ET two_layers: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-ET.txt" | tail -1) ($((SECONDS - t0)) s)"
[ "$(left)" -gt 40 ] && MIRAGE_MPK_WATCHDOG_MS=600000 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 1 .s41/decodeET --random qwen3-0.6b \
  --layers 2 --tokens 2 --pos 300 > "$out/a/memcheck-ET-qwen3.txt" 2>&1
echo "memcheck ET qwen3: exit $? $(grep -E 'ERROR SUMMARY' "$out/a/memcheck-ET-qwen3.txt" | head -1) ($((SECONDS - t0)) s)"
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 110 ] || break
  timeout 100 python3 benches/py/decode_baseline.py $m --pos 512 --json "$out/a/torch-decode-$m.json" > "$out/a/torch-decode-$m.txt" 2>&1
  echo "torch $m: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-$m.txt" | tail -3 | cut -c1-160
done
[ "$(left)" -gt 60 ] && run T llama-3.1-8b 512 1
if [ "$(left)" -gt 30 ]; then
  tar -xJf benches/results/s40/call1/ncu-llama-3.2-1b.tar.xz -C "$out/a"
  timeout 25 ncu -i "$out/a/ncu-llama-3.2-1b.ncu-rep" --page source --csv --print-source sass > "$out/a/ncu-1b-sass.csv" 2> "$out/a/ncu-1b-sass.err"
  echo "ncu export: $(wc -l < "$out/a/ncu-1b-sass.csv") lines"; rm -f "$out/a/ncu-llama-3.2-1b.ncu-rep"
fi
cd "$out" && tar -cJf a.tar.xz a && rm -rf a

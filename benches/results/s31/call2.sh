#!/usr/bin/env bash
# Session 31, device call 2 (meant for an H200): main before (B) and after (LV = main at 6eb7a66:
# changes 74-75) on the 1B and Qwen3 at 512, alternated; LV's 8B; then PyTorch's decode step
# (benches/py/decode_baseline.py: eager, CUDA graph, torch.compile + graph) for the 1B and Qwen3
# as the time left allows. Before PyTorch, LV's two-layer 1B and Qwen3 (the wide LM head and change
# 74's attention) under compute-sanitizer memcheck, and Qwen3's under racecheck. Results land in $OUT as they come. carry [".gpu-bundle"].
set -u
t0=$SECONDS
budget=${BUDGET:-330}
ok() { [ $((budget - SECONDS + t0)) -gt "$1" ]; }
python3 -c "
import tarfile
for b in ('B', 'LV'): tarfile.open(f'.gpu-bundle/{b}.tar.xz').extractall('.')"
log="$OUT/call2.txt"
{
nvidia-smi --query-gpu=name --format=csv,noheader
for b in B LV; do echo "== $b $(cat bench$b/COMMIT)"; done
for tm in memcheck:llama-3.2-1b memcheck:qwen3-0.6b racecheck:qwen3-0.6b; do
  t=${tm%%:*}; m=${tm##*:}
  ok 100 || { echo "$t $m: not run (time)"; continue; }
  echo "-- compute-sanitizer $t LV $m 2 layers ($((SECONDS - t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 90 compute-sanitizer --tool $t --error-exitcode 1 benchLV/decode --random $m \
    --layers 2 --tokens 2 --pos 300 > "$OUT/sanitizer-$t-$m.txt" 2>&1
  echo "exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ms/token" "$OUT/sanitizer-$t-$m.txt" | head -3
done
for mb in llama-3.2-1b:B llama-3.2-1b:LV qwen3-0.6b:B qwen3-0.6b:LV llama-3.1-8b:LV; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|error|panick" | head -1
done
for m in llama-3.2-1b qwen3-0.6b; do
  ok 120 || { echo "torch $m: not run (time)"; continue; }
  echo "-- torch $m pos 512 ($((SECONDS - t0)) s)"
  timeout 150 python3 benches/py/decode_baseline.py $m --pos 512 --json "$OUT/torch-decode-$m.json" 2>&1 | grep -vE "Warning|warn" | tail -6
done
echo "== done ($((SECONDS - t0)) s)"
} 2>&1 | tee "$log"

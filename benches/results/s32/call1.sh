#!/usr/bin/env bash
# Session 32, device call 1. (1) Change 76 (deep pipelines of small stages): bench binaries A
# (8c17c7d, main) and B (A + change 76) alternated A B A B on the cases whose kernels change (the
# split-K combines of the down projections) and controls, PyTorch (torch_baselines.py, compile
# mode default) first in the same call; compute-sanitizer racecheck/memcheck of B on the 32-stage
# combine. (2) Owed since session 31: main's decode (LV = changes 74-75) under compute-sanitizer,
# B (12cf3f1) vs LV ms/token, PyTorch's decode step, as time allows (benches/results/s31/call2.sh).
# carry [".gpu-bundle"]. Results land in $OUT as they come.
set -u
t0=$SECONDS
python3 -c "import tarfile; tarfile.open('.gpu-bundle/S.tar.xz').extractall('.')"
D=$(date -u +%F)
log=$OUT/call1.txt
CASES="mistral7b_down_resid_r1_bf16 mistral7b_mlp_block_r1_bf16 llama1b_mlp_block_r16_bf16 llama1b_down_r1_bf16 llama1b_down_r16_bf16 llama1b_down_r1_f16 llama1b_down_r16_f16 qwen7b_down_r16_f16 qwen7b_down_r16_bf16 mistral7b_down_resid_r16_bf16 llama1b_down_resid_r1_bf16 gated_mlp_bs1"
{
nvidia-smi --query-gpu=name --format=csv,noheader
cat benchS/COMMIT
echo "== torch ($(date -u +%T))"
timeout 150 python3 benches/py/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch1.json" 2>&1 | grep -vE "Warning|warn" | tail -4
for v in A B A B; do
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 60 benchS/gpu$v --torch "$OUT/torch1.json" --out "/tmp/ours1-$v" --commit "$v" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|MISMATCH|error|panick" | cut -c1-220
done
mkdir -p "$OUT/ours1"; for v in A B; do cp /tmp/ours1-$v/gpu-bench.json "$OUT/ours1/$v.json"; cp /tmp/ours1-$v/gpu-bench.md "$OUT/ours1/$v.md"; done
for t in racecheck memcheck; do
  echo "== compute-sanitizer $t B mistral7b_down_resid_r1_bf16 llama1b_down_r16_bf16 ($((SECONDS-t0)) s)"
  timeout 120 compute-sanitizer --tool $t --error-exitcode 1 benchS/gpuB --iters 2 mistral7b_down_resid_r1_bf16 llama1b_down_r16_bf16 > "$OUT/sanitizer-$t-B.txt" 2>&1
  echo "exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|MISMATCH" "$OUT/sanitizer-$t-B.txt" | head -3
done
echo "== part 1 done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 5000 "$log"
left=$((${BUDGET:-520} - SECONDS + t0))
BUDGET=$left bash benches/results/s31/call2.sh > /dev/null 2>&1
tail -c 5500 "$OUT/call2.txt"

#!/usr/bin/env bash
# Session 18, device call 3: what lands. Bench binaries D (79dc3de = main's code) and H (9dfed00:
# change 43 restricted by its calibrated rule + change 44) alternated D H D H on call 2's cases
# plus the two that stay k-strided and were not measured (qkv_rope_bs8,
# mistral7b_mlp_block_r16_bf16), PyTorch in the same call; then H's golden, #[mugraph] and
# random-program GPU tests.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/Dbench.tar.xz").extractall(".")
tarfile.open(".gpu-bundle/H.tar.xz").extractall(".")
PY
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
export LD_LIBRARY_PATH=$PWD/.gpu/lib
t0=$SECONDS
log=$OUT/call3.txt
CASES="qwen7b_down_r16_bf16 qwen7b_down_r16_f16 qwen7b_qkv_r16_bf16 llama1b_down_r16_bf16 llama1b_gateup_r16_bf16 llama1b_qkv_r16_bf16 qwen06b_down_r16_bf16 qwen06b_gateup_r16_bf16 gated_mlp_bs8 rmsnorm_linear_bs8 gqa_bs8 qknorm_gqa_bs8 lora mistral7b_down_resid_r16_bf16 llama1b_mlp_block_r16_bf16 qwen05b_norm_lm_head_r16_bf16 gated_mlp_bs1 rmsnorm_linear_bs1 qkv_rope_bs8 mistral7b_mlp_block_r16_bf16"
{
echo "== torch ($C, $(date -u +%T))"
timeout 100 python3 .gpu/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch3.json" 2>&1 | tail -3
for v in D H D H; do
  case $v in D) b=$(ls benchD/gpu-* | head -1);; H) b=$(ls .gpu/bin/test/gpu-* | head -1);; esac
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 45 "$b" --torch "$OUT/torch3.json" --out "/tmp/ours3-$v" --commit "$C-$v" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|MISMATCH|error" | cut -c1-200
done
mkdir -p "$OUT/ours3"; for v in D H; do cp /tmp/ours3-$v/gpu-bench.json "$OUT/ours3/$v.json"; done; cp /tmp/ours3-H/gpu-bench.md "$OUT/ours3/H.md"
left=$((230 - SECONDS + t0))
echo "== tests of H ($((SECONDS-t0)) s, $left s left)"
python3 -m tarfile -e .gpu/random.tar.xz .gpu && export MIRAGE_RANDOM_PACK=.gpu/random
for t in golden_gpu mugraph random_gpu; do
  b=$(ls .gpu/bin/test/$t-* | head -1)
  [ $left -gt 20 ] || { echo "$t: not run (time)"; continue; }
  timeout $((left - 10)) "$b" --include-ignored --test-threads=1 --nocapture > /tmp/$t.log 2>&1; echo "$t exit $?"
  grep -E "test result|FAILED|panicked|^MISMATCH|^random programs" /tmp/$t.log | head -6
  left=$((230 - SECONDS + t0))
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

#!/usr/bin/env bash
# Session 16, device call 2: the weight-bound bench cases A/B (A: change 38 alone, B: changes 38 +
# 39) and PyTorch in the same call (torch.compile default mode), then PyTorch's decode step
# (decode_baseline.py, position 512) for the three models.
set -u
python3 - <<'PY'
import tarfile
for f in (".gpu-bundle/B.tar.xz", ".gpu-bundle/benchA.tar.xz"):
    tarfile.open(f).extractall(".")
PY
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
t0=$SECONDS
log=$OUT/call2.txt
{
CASES="gated_mlp_bs1 gated_mlp_bs8 rmsnorm_linear_bs1 rmsnorm_linear_bs8 layernorm_linear_bs1 lm_head_argmax llama1b_norm_lm_head_r1_bf16 qwen05b_norm_lm_head_r1_bf16 qwen05b_norm_lm_head_r16_bf16 mistral7b_norm_lm_head_r1_bf16 mistral7b_down_resid_r1_bf16 mistral7b_norm_gated_r1_bf16 mistral7b_mlp_block_r1_bf16 mistral7b_norm_qkv_r1_bf16 llama1b_norm_gated_r1_bf16 llama1b_mlp_block_r1_bf16 llama1b_down_resid_r1_bf16 qwen05b_norm_gated_r1_bf16"
echo "== torch ($(date -u +%T))"
timeout 150 python3 .gpu/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch.json" 2>&1 | tail -3
bench=$(ls .gpu/bin/test/gpu-* | head -1)
for v in A B A B; do
  b=$bench; [ $v = A ] && b=benchA/gpu
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 70 "$b" --torch "$OUT/torch.json" --out "$OUT/ours-$v" --commit "$C-$v" --date "$D" $CASES 2>&1 | grep -E "^\||worst|MISMATCH|error" | cut -c1-200 | tail -22
done
echo "== torch decode ($((SECONDS-t0)) s)"
timeout 150 python3 .gpu/decode_baseline.py llama-3.2-1b qwen3-0.6b llama-3.1-8b --pos 512 --json "$OUT/torch-decode.json" 2>&1 | tail -8
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

#!/usr/bin/env bash
# Session 32, device call 3: what the re-tuning of call 2 (53 programs, H100) changes. Bench
# binaries B (8c17c7d + change 76, the cache as it was) and C (B + the imported records)
# alternated B C B C on the benchmark and generality sets, PyTorch (torch_baselines.py, compile
# mode default) first in the same call. carry [".gpu-bundle"].
set -u
t0=$SECONDS
python3 -c "import tarfile; tarfile.open('.gpu-bundle/S2.tar.xz').extractall('.')"
D=$(date -u +%F)
log=$OUT/call3.txt
CASES="gated_mlp_bs1 gated_mlp_bs8 rmsnorm_linear_bs1 rmsnorm_linear_bs8 gqa_bs1 gqa_bs8 qknorm_gqa_bs1 qknorm_gqa_bs8 ntrans_bs1 ntrans_bs8 lora qk_rope_bs1 qk_rope_bs8 lm_head_argmax layernorm_linear_bs1 layernorm_linear_bs8 llama1b_qkv_r1_bf16 llama1b_gateup_r1_bf16 llama1b_down_r1_bf16 llama1b_qkv_r16_bf16 llama1b_gateup_r16_bf16 llama1b_down_r16_bf16 llama1b_qkv_r1_f16 llama1b_gateup_r1_f16 llama1b_down_r1_f16 llama1b_qkv_r16_f16 llama1b_gateup_r16_f16 llama1b_down_r16_f16 qwen06b_qkv_r1_bf16 qwen06b_gateup_r1_bf16 qwen06b_down_r1_bf16 qwen06b_qkv_r16_bf16 qwen06b_gateup_r16_bf16 qwen06b_down_r16_bf16 qwen06b_qkv_r1_f16 qwen06b_gateup_r1_f16 qwen06b_down_r1_f16 qwen06b_qkv_r16_f16 qwen06b_gateup_r16_f16 qwen06b_down_r16_f16 qwen7b_qkv_r1_bf16 qwen7b_gateup_r1_bf16 qwen7b_down_r1_bf16 qwen7b_qkv_r16_bf16 qwen7b_gateup_r16_bf16 qwen7b_down_r16_bf16 qwen7b_qkv_r1_f16 qwen7b_gateup_r1_f16 qwen7b_down_r1_f16 qwen7b_qkv_r16_f16 qwen7b_gateup_r16_f16 qwen7b_down_r16_f16 llama1b_gateup_r8_f32 qkv_rope_bs1 qkv_rope_bs8"
{
nvidia-smi --query-gpu=name --format=csv,noheader
cat benchS/COMMIT
echo "== torch ($(date -u +%T))"
timeout 240 python3 benches/py/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch3.json" 2>&1 | grep -vE "Warning|warn" | tail -3
for v in B C B C; do
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 100 benchS/gpu$v --torch "$OUT/torch3.json" --out "/tmp/ours3-$v" --commit "$v" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|MISMATCH|error|panick" | cut -c1-220
done
mkdir -p "$OUT/ours3"; for v in B C; do cp /tmp/ours3-$v/gpu-bench.md "$OUT/ours3/$v.md"; done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

#!/usr/bin/env bash
# Session 37, device call 4: 12 corpus programs that lost to PyTorch or tied in session 32's
# table, 34-40 candidates each (.tune/s37corp, packed with 8d27ba8's code; every candidate checked
# against the CPU reference, then timed), beside torch_baselines.py --set corpus on the same 15
# programs (three are partitioned builds, not tunable). Carry .gpu-s37/tune3.tar.xz (.tune/tune,
# s37corp) and .tune/lib.tar.xz. Everything it writes is packed into one archive at the end.
set -u
root=$PWD
out=${OUT:-/tmp/s37}
mkdir -p "$out/c4" .tune/lib
t0=$SECONDS
tar -xJf .gpu-s37/tune3.tar.xz
tar -xJf .tune/lib.tar.xz -C .tune/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c4/gpu.txt"
export LD_LIBRARY_PATH="$root/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
L=llama1b_norm_lm_head_r1_bf16,llama1b_norm_qkv_r16_bf16,llama1b_o_resid_r16_bf16,llama1b_down_resid_r16_bf16,llama1b_mlp_block_r16_bf16,qwen05b_norm_qkv_r16_bf16,qwen05b_down_resid_r16_bf16,qwen05b_norm_lm_head_r1_bf16,qwen05b_norm_lm_head_r16_bf16,mistral7b_norm_qkv_r16_bf16,mistral7b_o_resid_r16_bf16,mistral7b_norm_gated_r16_bf16,mistral7b_down_resid_r16_bf16,mistral7b_mlp_block_r16_bf16,mistral7b_norm_lm_head_r16_bf16
timeout 240 python3 benches/py/torch_baselines.py --set corpus --only $L --compile-mode default --json "$out/c4/torch.json" > "$out/c4/torch.txt" 2>&1
echo "torch: exit $? ($((SECONDS - t0)) s)"
timeout 300 .tune/tune measure .tune/s37corp --out "$out/c4/corp.json" > "$out/c4/corp.txt" 2> "$out/c4/corp.log"
echo "ours: exit $? ($((SECONDS - t0)) s)"
grep -iE "not measured|error|mismatch|skipped" "$out/c4/corp.log" | head -10
grep "model's choice" "$out/c4/corp.log"
tail -20 "$out/c4/torch.txt"
cd "$out" && tar -cJf c4.tar.xz c4 && rm -rf c4

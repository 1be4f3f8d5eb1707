#!/usr/bin/env bash
# Session 15, device call 4: the corpus µGraphs of change 37 (Qwen norm + gated MLP, one kernel /
# two without the g⊗W intermediate) with same-run PyTorch.
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/bench.tar.xz').extractall('.')"
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
bench=$(ls .gpu/bin/bench/gpu-* .gpu/bin/test/gpu-* 2>/dev/null | head -1)
log=$OUT/call4.txt
t0=$SECONDS
{
echo "== torch, $(date -u +%T)"
timeout 90 python3 .gpu/torch_baselines.py qwen05b_norm_gated_r1_bf16 qwen05b_norm_gated_r16_bf16 llama1b_norm_gated_r1_bf16 mistral7b_norm_gated_r1_bf16 --compile-mode default --json "$OUT/torch-corpus.json" 2>&1 | tail -6

cp "$OUT/torch-corpus.json" "$OUT/torch.json"
echo "== ours, $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 240 "$bench" --torch "$OUT/torch.json" --out "$OUT/ours" --commit "$C" --date "$D" qwen05b_norm_gated_r1_bf16 qwen05b_norm_gated_r16_bf16 llama1b_norm_gated_r1_bf16 mistral7b_norm_gated_r1_bf16 2>&1 | grep -E "^\||worst|MISMATCH|error" | cut -c1-300 | tail -80
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

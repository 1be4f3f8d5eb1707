#!/usr/bin/env bash
# Session 34, device call 5: the decode-attention family (benches/kernels/attention.rs, 10
# programs: the three of before and 8/16 rows per KV head, GQA in f16, 512 and 32768 keys, head
# dim 64), PyTorch's anchors (`torch_baselines.py --set attention`: eager, CUDA graph,
# torch.compile, SDPA) and every packed candidate of ours (`tune pack --candidates 12`, .tune/attnF:
# 121 candidates, each checked against the CPU reference, then timed) in the same call.
# Carry .tune/tune, .tune/lib, .tune/attnF.
set -u
out=${OUT:-/tmp/s34}
mkdir -p "$out/c5"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c5/gpu.txt"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 280 python3 benches/py/torch_baselines.py --set attention --compile-mode default --json "$out/c5/torch.json" > "$out/c5/torch.txt" 2>&1
echo "torch: exit $? ($((SECONDS - t0)) s)"
timeout 280 .tune/tune measure .tune/attnF --out "$out/c5/attn.json" > "$out/c5/attn.txt" 2> "$out/c5/attn.log"
echo "ours: exit $? ($((SECONDS - t0)) s)"
grep -iE "not measured|error|mismatch|skipped" "$out/c5/attn.log" | head -10
tail -12 "$out/c5/torch.txt"
tail -14 "$out/c5/attn.txt"
cp "$out/c5/attn.json" "$out/attn.json"
cd "$out" && tar -cJf c5.tar.xz c5 && rm -rf c5
echo "done ($((SECONDS - t0)) s)"

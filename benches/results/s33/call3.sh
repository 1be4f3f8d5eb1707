#!/usr/bin/env bash
# Session 33, device call 3: every candidate (294) of the GQA attention program with grouped
# split-KV in the search (change 80), measured; PyTorch's attention anchors in the same call.
# Carry .tune/tune, .tune/lib, .tune/attn2.
set -u
out=${OUT:-/tmp/s33}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$(date +%s)
python3 benches/py/torch_baselines.py --set attention --compile-mode default --json "$out/attn3-torch.json" > "$out/attn3-torch.txt" 2>&1
echo "torch attention: exit $? after $(( $(date +%s) - start )) s"
.tune/tune measure .tune/attn2 --out "$out/attn3.json" > "$out/attn3.txt" 2> "$out/attn3.log"
echo "gqa tune: exit $? after $(( $(date +%s) - start )) s"
tail -5 "$out/attn3-torch.txt"
grep -iE "brought|not measured|error|mismatch" "$out/attn3.log" | head
cat "$out/attn3.txt" | tail -8

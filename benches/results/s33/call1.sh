#!/usr/bin/env bash
# Session 33, device call 1: the attention programs' 16 candidates each and the corpus packed with
# the cache's current choices (tune pack of this session) measured, PyTorch's attention anchors
# in the same call. Carry .tune/tune, .tune/lib, .tune/attn, .tune/corpus.
set -u
out=${OUT:-/tmp/s33}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$(date +%s)
python3 benches/py/torch_baselines.py --set attention --compile-mode default --json "$out/attn-torch.json" > "$out/attn-torch.txt" 2>&1
echo "torch attention: exit $? after $(( $(date +%s) - start )) s"
.tune/tune measure .tune/attn --out "$out/attn.json" > "$out/attn.txt" 2> "$out/attn.log"
echo "attention tune: exit $? after $(( $(date +%s) - start )) s"
.tune/tune measure .tune/corpus --out "$out/corpus.json" > "$out/corpus.txt" 2> "$out/corpus.log"
echo "corpus tune: exit $? after $(( $(date +%s) - start )) s"
tail -30 "$out/attn-torch.txt"
cat "$out/attn.txt"
grep -iE "brought|not measured|error" "$out/corpus.log" | head
tail -45 "$out/corpus.txt"

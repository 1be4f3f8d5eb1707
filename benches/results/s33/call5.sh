#!/usr/bin/env bash
# Session 33, device call 5: the attention group's chosen µGraphs with programmatic dependent
# launch (change 81) beside PyTorch's attention anchors in the same call (bundle .tune/pdl,
# --only attn_), then compute-sanitizer memcheck and racecheck over two two-kernel programs
# launched with PDL (the tuner's measuring process: the check against the CPU reference and the
# timed launches). Carry .tune/tune, .tune/lib, .tune/pdl.
set -u
out=${OUT:-/tmp/s33}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 benches/py/torch_baselines.py --set attention --compile-mode default --json "$out/attn5-torch.json" > "$out/attn5-torch.txt" 2>&1
echo "torch: exit $?"
.tune/tune measure .tune/pdl --only attn_ --out "$out/attn5.json" > "$out/attn5.txt" 2> "$out/attn5.log"
echo "ours: exit $?"
tail -4 "$out/attn5-torch.txt"
tail -6 "$out/attn5.txt"
: > "$out/sanitizer5.txt"
for tool in memcheck racecheck; do
  for prog in attn_gqa_kv8_g4_n4096_d128_bf16 llama1b_down_r16_bf16; do
    skip=$(python3 -c "import json,sys; m=json.load(open('.tune/pdl/manifest.json')); p=[p for p in m['programs'] if p['name']=='$prog'][0]; n=len(p['candidates']); print(','.join(str(i) for i in range(n-1)))")
    echo "== $tool $prog (skip $skip)" >> "$out/sanitizer5.txt"
    timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 .tune/tune measure-program .tune/pdl "$prog" --skip "$skip" > /tmp/san.txt 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|Checked|Done" /tmp/san.txt | head -8 >> "$out/sanitizer5.txt"
    echo "exit $rc" >> "$out/sanitizer5.txt"
  done
done
cat "$out/sanitizer5.txt"

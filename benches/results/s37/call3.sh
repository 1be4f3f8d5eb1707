#!/usr/bin/env bash
# Session 37, device call 3: the decode-attention family with 40 candidates per program
# (.tune/s37att, packed with main's code of change 87; every candidate checked against the CPU
# reference, then timed) beside PyTorch's attention anchors in the same call; then
# compute-sanitizer (memcheck, racecheck, synccheck) over change 87's vector reductions: the
# Qwen-7B 16-row QKV's candidates with the 256-thread combine (s37Cn) and gqa_bs1 (s37Bb).
# Carry .gpu-s37/tune2.tar.xz (.tune/tune, s37att, s37Cn, s37Bb), .tune/lib.tar.xz, and the
# tracked benches/py. Everything it writes is packed into one archive at the end.
set -u
root=$PWD
out=${OUT:-/tmp/s37}
mkdir -p "$out/c3" .tune/lib
t0=$SECONDS
tar -xJf .gpu-s37/tune2.tar.xz
tar -xJf .tune/lib.tar.xz -C .tune/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c3/gpu.txt"
export LD_LIBRARY_PATH="$root/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 150 python3 benches/py/torch_baselines.py --set attention --compile-mode default --json "$out/c3/torch.json" > "$out/c3/torch.txt" 2>&1
echo "torch: exit $? ($((SECONDS - t0)) s)"
timeout 240 .tune/tune measure .tune/s37att --out "$out/c3/attn.json" > "$out/c3/attn.txt" 2> "$out/c3/attn.log"
echo "ours: exit $? ($((SECONDS - t0)) s)"
grep -iE "not measured|error|mismatch|skipped" "$out/c3/attn.log" | head -10
grep "model's choice" "$out/c3/attn.log"
TUNE=.tune/tune timeout 150 bash scripts/sanitize-bundle.sh .tune/s37Cn "$out/c3/san" qwen7b_qkv_r16_bf16
TUNE=.tune/tune timeout 60 bash scripts/sanitize-bundle.sh .tune/s37Bb "$out/c3/san" gqa_bs1
echo "done ($((SECONDS - t0)) s)"
cd "$out" && tar -cJf c3.tar.xz c3 && rm -rf c3

#!/usr/bin/env bash
# Session 34, device call 7: what lands. First the decode-attention family with change 83
# (.tune/attnG, every candidate checked against the CPU reference, then timed) beside PyTorch's
# attention anchors in the same call; then the GPU tests, examples and the default
# compute-sanitizer stage of the working tree (scripts/gpu-pack.sh, then
# `tar -cf - .gpu | xz > .gpu-s34/gpu.tar.xz`), no benchmark. Carry .tune/tune, .tune/attnG,
# .gpu-s34 (the tuner takes libz3 from the pack's).
set -u
out=${OUT:-/tmp/s34}
mkdir -p "$out/c7"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c7/gpu.txt"
tar -xJf .gpu-s34/gpu.tar.xz
echo "packed $(cat .gpu/COMMIT)"
mkdir -p /tmp/z3lib && tar -xJf .gpu/lib.tar.xz -C /tmp/z3lib
(
  export LD_LIBRARY_PATH="/tmp/z3lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  timeout 150 python3 benches/py/torch_baselines.py --set attention --compile-mode default --json "$out/c7/torch.json" > "$out/c7/torch.txt" 2>&1
  echo "torch: exit $? ($((SECONDS - t0)) s)"
  timeout 120 .tune/tune measure .tune/attnG --out "$out/c7/attn.json" > "$out/c7/attn.txt" 2> "$out/c7/attn.log"
  echo "ours: exit $? ($((SECONDS - t0)) s)"
  grep -iE "not measured|error|mismatch|skipped" "$out/c7/attn.log" | head -10
)
OUT="$out/c7/tests" MIRAGE_BENCH_RUN=0 MIRAGE_SANITIZER_BUDGET_S=150 timeout 400 bash scripts/gpu-run-all.sh > "$out/c7/run-all.txt" 2>&1
echo "gpu-run-all: exit $? ($((SECONDS - t0)) s)"
rm -f "$out"/c7/tests/mpk_toy_trace.json "$out"/c7/tests/mpk_toy_sanitized.json
grep -A60 "==== summary" "$out/c7/run-all.txt" | head -70
cd "$out" && tar -cJf c7.tar.xz c7 && rm -rf c7
echo "done ($((SECONDS - t0)) s)"

#!/usr/bin/env bash
# Session 35, device call 3 (in this order: 3, 4, 2, 1): (1) the per-SM streaming microbenchmark
# (stream.cu); (2) the GPU
# tests, examples (whole-model decode included: MIRAGE_DECODE=1 pack) and default sanitizer stage
# of the working tree with change 84 (scripts/gpu-pack.sh, .gpu-s35/gpu.tar.xz); (3) change 84's
# A/B: the cached µGraphs of the eight programs whose code it changes, packed before (.tune/s35A)
# and after (.tune/s35B), each checked against the CPU reference, timed A then B (one round:
# the session's device time was nearly spent on failed starts); the microbenchmark only if time is left; (4) memcheck,
# racecheck and synccheck of B's k-strided kernels (scripts/sanitize-bundle.sh).
# Carry .tune/tune, .tune/s35A, .tune/s35B, .gpu-s35.
set -u
out=${OUT:-/tmp/s35}
mkdir -p "$out/c3"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c3/gpu.txt"
tar -xJf .gpu-s35/gpu.tar.xz
echo "packed $(cat .gpu/COMMIT)"
mkdir -p /tmp/z3lib && tar -xJf .gpu/lib.tar.xz -C /tmp/z3lib
export LD_LIBRARY_PATH="/tmp/z3lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for r in 1; do
  for v in A B; do
    timeout 60 .tune/tune measure .tune/s35$v --out "$out/c3/$v$r.json" > "$out/c3/$v$r.txt" 2> "$out/c3/$v$r.log"
    echo "$v$r: exit $? ($((SECONDS - t0)) s)"
  done
done
grep -iE "not measured|error|mismatch|skipped" "$out"/c3/[AB]*.log | head -10
python3 - "$out/c3" <<'PY'
import json, sys, statistics
d = sys.argv[1]
def load(v):
    runs = [json.load(open(f"{d}/{v}{r}.json")) for r in (1,)]
    res = {}
    for run in runs:
        for p in run["programs"]:
            res.setdefault(p["name"], []).append(p["candidates"][0].get("measured_us"))
    return res
a, b = load("A"), load("B")
for name in a:
    print(f"{name:28s} A {a[name]}  B {b.get(name)}  B/A {statistics.mean(b[name]) / statistics.mean(a[name]):.3f}")
PY
TUNE=.tune/tune bash scripts/sanitize-bundle.sh .tune/s35B "$out/c3/san" qwen7b_down_r16_bf16
echo "sanitizer: ($((SECONDS - t0)) s)"
OUT="$out/c3/tests" MIRAGE_BENCH_RUN=0 MIRAGE_SANITIZER_BUDGET_S=40 timeout 250 bash scripts/gpu-run-all.sh > "$out/c3/run-all.txt" 2>&1
echo "gpu-run-all: exit $? ($((SECONDS - t0)) s)"
[ $((SECONDS - t0)) -lt 300 ] && nvcc -O3 -arch=sm_90a -std=c++17 -o /tmp/stream benches/results/s35/stream.cu -lcuda && timeout 40 /tmp/stream > "$out/c3/stream.txt" 2>&1
echo "stream: exit $? ($((SECONDS - t0)) s)"
cat "$out/c3/stream.txt"
rm -f "$out"/c3/tests/mpk_toy_trace.json "$out"/c3/tests/mpk_toy_sanitized.json
grep -A60 "==== summary" "$out/c3/run-all.txt" | head -70
cd "$out" && tar -cJf c3.tar.xz c3 && rm -rf c3
echo "done ($((SECONDS - t0)) s)"

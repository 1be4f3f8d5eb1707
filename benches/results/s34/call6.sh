#!/usr/bin/env bash
# Session 34, device call 6: change 83 (scalar operators join wider element-wise passes). The
# decode-attention family's candidates packed at 2aaadfb (A, .tune/attnF) and with the change (B,
# .tune/attnG), A B A B, every candidate checked against the CPU reference; then memcheck,
# racecheck and synccheck over B's candidates of two programs. Carry .tune/tune, .tune/lib,
# .tune/attnF, .tune/attnG.
set -u
out=${OUT:-/tmp/s34}
mkdir -p "$out/c6"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c6/gpu.txt"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
n=0
for v in F G F G; do
  n=$((n + 1))
  timeout 120 .tune/tune measure .tune/attn$v --out "$out/c6/$v$n.json" > "$out/c6/$v$n.txt" 2> "$out/c6/$v$n.log"
  echo "$v$n: exit $? ($((SECONDS - t0)) s)"
done
grep -iE "not measured|error|mismatch|skipped" "$out"/c6/*.log | head -20
cp -r .tune/attnG /tmp/attnS
python3 - <<'PY'
import json
p = "/tmp/attnS/manifest.json"
m = json.load(open(p))
m.update(warmup=0, iters=2, rounds=1)
json.dump(m, open(p, "w"))
PY
for prog in attn_gqa_kv8_g4_n4096_d128_bf16 attn_decode_h32_n4096_d128_bf16; do
  for tool in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $tool --print-limit 20 .tune/tune measure-program /tmp/attnS $prog > "$out/c6/san-$tool-$prog.txt" 2>&1
    echo "$tool $prog: exit $? ($((SECONDS - t0)) s): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/c6/san-$tool-$prog.txt" | tail -1)"
  done
done
cd "$out" && tar -cJf c6.tar.xz c6 && rm -rf c6
echo "done ($((SECONDS - t0)) s)"

#!/usr/bin/env bash
# Session 34, device call 2: consumers finished in the producer's launch (codegen::fuse). The same
# 21 attention and down-projection programs (69 candidates: .tune/fuseA packed with
# MIRAGE_FUSE_CONSUMERS=0, .tune/fuseB with fusion) measured A B A B with `tune measure` (every
# candidate checked against the CPU reference first), then compute-sanitizer memcheck, racecheck
# and synccheck over fused candidates of two programs. Carry .tune/tune, .tune/lib, .tune/fuseA,
# .tune/fuseB.
set -u
out=${OUT:-/tmp/s34}
mkdir -p "$out/fuse"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/fuse/gpu.txt"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for r in 1 2; do
  for v in A B; do
    timeout 150 .tune/tune measure .tune/fuse$v --out "$out/fuse/${v,,}$r.json" > "$out/fuse/${v,,}$r.txt" 2> "$out/fuse/${v,,}$r.log"
    echo "$v$r: exit $? ($((SECONDS - t0)) s)"
  done
done
grep -iE "not measured|error|mismatch|skipped" "$out"/fuse/*.log | head -20
# The sanitizer's copy: 2 timed launches per candidate, no warm-up, one round.
cp -r .tune/fuseB /tmp/fuseS
python3 - <<'PY'
import json
p = "/tmp/fuseS/manifest.json"
m = json.load(open(p))
m.update(warmup=0, iters=2, rounds=1)
json.dump(m, open(p, "w"))
PY
for prog in attn_decode_h32_n4096_d128_bf16 llama1b_down_r16_bf16; do
  for tool in memcheck racecheck synccheck; do
    timeout 100 compute-sanitizer --tool $tool --print-limit 20 .tune/tune measure-program /tmp/fuseS $prog > "$out/fuse/san-$tool-$prog.txt" 2>&1
    echo "$tool $prog: exit $? ($((SECONDS - t0)) s): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "$out/fuse/san-$tool-$prog.txt" | tail -1)"
  done
done
cd "$out" && tar -cJf fuse.tar.xz fuse && rm -rf fuse
echo "done ($((SECONDS - t0)) s)"

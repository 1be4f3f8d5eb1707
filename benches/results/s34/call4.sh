#!/usr/bin/env bash
# Session 34, device call 4: change 82 as it lands (a consumer finished in its producer's launch
# only when its last block runs at most 2 loop iterations of it; Program::launch keeps one block
# of completion counters per stream instead of allocating them per call). The decode attention's
# candidates unfused (.tune/fuseA, MIRAGE_FUSE_CONSUMERS=0) and fused (.tune/fuseB), A B A B B A,
# beside PyTorch's attention anchors of the same call; then memcheck and synccheck over the fused
# candidates. Carry .tune/tune, .tune/lib, .tune/fuseA, .tune/fuseB.
set -u
out=${OUT:-/tmp/s34}
mkdir -p "$out/c4"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c4/gpu.txt"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 benches/py/torch_baselines.py --set attention --compile-mode default --json "$out/c4/torch.json" > "$out/c4/torch.txt" 2>&1
echo "torch: exit $? ($((SECONDS - t0)) s)"
n=0
for v in A B A B B A; do
  n=$((n + 1))
  .tune/tune measure .tune/fuse$v --out "$out/c4/$v$n.json" > "$out/c4/$v$n.txt" 2> "$out/c4/$v$n.log"
  echo "$v$n: exit $? ($((SECONDS - t0)) s)"
done
grep -iE "not measured|error|mismatch|skipped" "$out"/c4/*.log | head -20
tail -4 "$out/c4/torch.txt"
cp -r .tune/fuseB /tmp/fuseS
python3 - <<'PY'
import json
p = "/tmp/fuseS/manifest.json"
m = json.load(open(p))
m.update(warmup=0, iters=2, rounds=1)
json.dump(m, open(p, "w"))
PY
for prog in attn_decode_h32_n4096_d128_bf16 attn_decode_h32_n4096_d128_f16; do
  for tool in memcheck synccheck racecheck; do
    timeout 100 compute-sanitizer --tool $tool --print-limit 20 .tune/tune measure-program /tmp/fuseS $prog > "$out/c4/san-$tool-$prog.txt" 2>&1
    echo "$tool $prog: exit $? ($((SECONDS - t0)) s): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/c4/san-$tool-$prog.txt" | tail -1)"
  done
done
cd "$out" && tar -cJf c4.tar.xz c4 && rm -rf c4
echo "done ($((SECONDS - t0)) s)"

#!/usr/bin/env bash
# Session 15, device call 2: our bench (benchmark, attention, dims, corpus), decode at pos 512,
# then the PyTorch anchors (compile mode default) of the same run. Logs to $OUT.
set -u
python3 - <<'PY'
import tarfile
for f in (".gpu-bundle/all.tar.xz", ".gpu-bundle/decode.tar.xz"):
    tarfile.open(f).extractall(".")
PY
mkdir -p .gpu/lib && python3 -m tarfile -e .gpu/lib.tar.xz .gpu/lib 2>/dev/null
export LD_LIBRARY_PATH=$PWD/.gpu/lib
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
bench=$(ls .gpu/bin/bench/gpu-* .gpu/bin/test/gpu-* 2>/dev/null | head -1)
log=$OUT/call2.txt
t0=$SECONDS
{
echo "== ours (all groups), $(date -u +%T)"
timeout 200 "$bench" --out "$OUT/ours" --commit "$C" --date "$D" 2>&1 | grep -v "^test\|seed" | tail -120
echo "== decode, $(date -u +%T) ($((SECONDS-t0)) s)"
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- $m 512"
  timeout 60 .gpu/bin/example/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|waiting|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+|kind|megakernel" | head -30
done
echo "== torch bench, $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 100 python3 .gpu/torch_baselines.py --set bench --compile-mode default --json "$OUT/torch-bench.json" 2>&1 | tail -15
echo "== torch corpus r1 + qwen lm r16, $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 110 python3 .gpu/torch_baselines.py --set corpus --only _r1_,qwen05b_norm_lm_head_r16 --compile-mode default --json "$OUT/torch-corpus.json" 2>&1 | tail -22
echo "== torch dims, $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 50 python3 .gpu/torch_baselines.py --set dims --compile-mode default --json "$OUT/torch-dims.json" 2>&1 | tail -6
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

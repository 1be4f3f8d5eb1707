#!/usr/bin/env bash
# Session 19, device call 2: change 45 (thread-strided loops at compile-time trip counts).
# M = binaries of 4754c82 (main before it: bench and decode), N = 8b5eec9 (change 45).
# Decode A/B (M N M N, Llama-3.2-1B; N with the per-kind profile on all three models); then the
# benchmark eleven + the generality set, M then N, PyTorch (eager, graph, compile
# default) in the same call.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/Nbench.tar.xz").extractall(".")
tarfile.open(".gpu-bundle/Mbench.tar.xz").extractall(".")
PY
mkdir -p /tmp/d && xz -dc .gpu-bundle/dec0/decode.xz > /tmp/d/decodeM && chmod +x /tmp/d/decodeM
C=8b5eec9; D=$(date -u +%F)
t0=$SECONDS
log=$OUT/call2.txt
{
echo "== decode A/B ($C)"
for v in M N M N; do
  case $v in M) b=/tmp/d/decodeM;; N) b=benchN/decode;; esac
  echo "-- $v llama-3.2-1b ($((SECONDS-t0)) s)"
  timeout 40 $b --random llama-3.2-1b --tokens 64 --pos 512 2>&1 | grep -E "ms/token|busy|error|panick" | head -4
done
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- N $m profile ($((SECONDS-t0)) s)"
  timeout 50 benchN/decode --random $m --tokens 64 --pos 512 --profile > "$OUT/decodeN-$m.txt" 2>&1
  grep -E "ms/token|busy|error|panick|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ " "$OUT/decodeN-$m.txt" | head -16
done
B="gated_mlp_bs1 gated_mlp_bs8 rmsnorm_linear_bs1 rmsnorm_linear_bs8 lm_head_argmax qkv_rope_bs1 qkv_rope_bs8 gqa_bs1 gqa_bs8 qknorm_gqa_bs1 qknorm_gqa_bs8 lora layernorm_linear_bs1 layernorm_linear_bs8 ntrans_bs1 ntrans_bs8 qk_rope_bs1 qk_rope_bs8"
G=$(grep -o "pub fn [a-z0-9_]*" benches/kernels/generality.rs | awk '{print $3}' | tr '\n' ' ')
echo "== torch ($((SECONDS-t0)) s)"
timeout 110 python3 benches/py/torch_baselines.py --compile-mode default --json /tmp/tb.json 2>&1 | grep -E "^device" 
timeout 110 python3 benches/py/torch_baselines.py --set generality --compile-mode default --json /tmp/tg.json 2>&1 | grep -E "^device"
python3 - <<'PY'
import json, os
a = json.load(open("/tmp/tb.json")); 
try:
    g = json.load(open("/tmp/tg.json")); a["rows"].update(g["rows"])
except Exception as e: print("generality torch missing:", e)
json.dump(a, open(os.environ["OUT"] + "/torch2.json", "w"), indent=1)
PY
for v in M N; do
  case $v in M) b=$(ls benchM/gpu-* | head -1);; N) b=$(ls benchN/gpu-* | head -1);; esac
  left=$((580 - SECONDS + t0)); [ $left -gt 40 ] || { echo "ours $v: not run (time)"; continue; }
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout $((left - 5)) "$b" --torch "$OUT/torch2.json" --out "/tmp/ours2-$v" --commit "$C-$v" --date "$D" $B $G 2>&1 | grep -E "^\| [a-z]|MISMATCH|error" | cut -c1-200
  mkdir -p "$OUT/ours2"; cp /tmp/ours2-$v/gpu-bench.json "$OUT/ours2/$v-$SECONDS.json" 2>/dev/null; cp /tmp/ours2-$v/gpu-bench.md "$OUT/ours2/$v-$SECONDS.md" 2>/dev/null
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

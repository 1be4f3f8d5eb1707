#!/usr/bin/env bash
# Session 19, device call 4: PyTorch's decode step (decode_baseline.py: eager, CUDA graph,
# torch.compile + graph) for Llama-3.2-1B at position 512 beside ours (P = changes 45-47) in the
# same call; the bench cases with CUDA-core matmuls, N and P alternated; then Nsight Compute's
# per-instruction samples of one launch of P's 1B step (where the time goes now).
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/Pbench.tar.xz").extractall(".")
tarfile.open(".gpu-bundle/Nbench.tar.xz").extractall(".")
PY
C=bd0f184; D=$(date -u +%F)
t0=$SECONDS
log=$OUT/call4.txt
{
echo "== ours P decode ($((SECONDS-t0)) s)"
timeout 40 benchP/decode --random llama-3.2-1b --tokens 64 --pos 512 2>&1 | grep -E "ms/token|busy|error|panick" | head -4
echo "== torch decode ($((SECONDS-t0)) s)"
timeout 230 python3 benches/py/decode_baseline.py llama-3.2-1b --pos 512 --json "$OUT/torch-decode.json" 2>&1 | grep -vE "Warning|warn" | tail -6
echo "== ours P decode again ($((SECONDS-t0)) s)"
timeout 40 benchP/decode --random llama-3.2-1b --tokens 64 --pos 512 2>&1 | grep -E "ms/token|busy|error|panick" | head -4
CASES="gated_mlp_bs1 gated_mlp_bs8 rmsnorm_linear_bs1 lm_head_argmax llama1b_qkv_r1_bf16 llama1b_gateup_r1_bf16 llama1b_down_r1_bf16 qwen06b_qkv_r1_bf16 qwen06b_gateup_r1_bf16 qwen06b_down_r1_bf16 qwen7b_qkv_r1_bf16 qwen7b_gateup_r1_bf16 qwen7b_down_r1_bf16 llama1b_gateup_r8_f32"
for v in N P N P; do
  case $v in N) b=$(ls benchN/gpu-* | head -1);; P) b=$(ls benchP/gpu-* | head -1);; esac
  left=$((500 - SECONDS + t0)); [ $left -gt 30 ] || { echo "ours $v: not run (time)"; continue; }
  echo "== bench $v ($((SECONDS-t0)) s)"
  timeout $((left - 5)) "$b" --out "/tmp/ours4-$v" --commit "$C-$v" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|MISMATCH|error" | cut -c1-120
  mkdir -p "$OUT/ours4"; cp /tmp/ours4-$v/gpu-bench.json "$OUT/ours4/$v-$SECONDS.json" 2>/dev/null
done
left=$((570 - SECONDS + t0))
if [ $left -gt 60 ]; then
  echo "== ncu P ($((SECONDS-t0)) s)"
  timeout $((left - 10)) ncu --clock-control none --section WarpStateStats --section SourceCounters --section SpeedOfLight \
    -k regex:decode_llama -s 4 -c 1 -f -o /tmp/n4 benchP/decode --random llama-3.2-1b --tokens 8 --pos 512 > /tmp/ncu4.log 2>&1
  echo "ncu exit $?"
  ncu -i /tmp/n4.ncu-rep --page details 2>&1 | grep -E "DRAM Throughput|Duration|Warp Cycles Per Issued|One or More Eligible" | head
  ncu -i /tmp/n4.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -T4 > "$OUT/ncu4-source-sass.csv.xz"
  cuobjdump -sass benchP/decode_llama_3_2_1b.cubin 2>&1 | xz -T4 > "$OUT/sass4.txt.xz"
fi
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 9000 "$log"

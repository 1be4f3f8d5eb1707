#!/usr/bin/env bash
# Session 18, device call 2: changes 43 (k-steps dealt to the warps) and 44 (vector element-wise
# passes). Bench binaries D (79dc3de = main's code), F (741cb35: change 43) and G (a241465:
# changes 43 + 44) alternated D F G D F G on the cases whose kernels changed (and controls), with
# PyTorch (eager, graph, compile default) in the same call; the three decode models on G; then
# the whole GPU test suite on G (quick sanitizer) with the time left.
set -u
python3 - <<'PY'
import tarfile
for b in ("Dbench", "Fbench"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
tarfile.open(".gpu-bundle/G.tar.xz").extractall(".")
PY
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
export LD_LIBRARY_PATH=$PWD/.gpu/lib
t0=$SECONDS
log=$OUT/call2.txt
CASES="qwen7b_down_r16_bf16 qwen7b_down_r16_f16 qwen7b_qkv_r16_bf16 llama1b_down_r16_bf16 llama1b_gateup_r16_bf16 llama1b_qkv_r16_bf16 qwen06b_down_r16_bf16 qwen06b_gateup_r16_bf16 gated_mlp_bs8 rmsnorm_linear_bs8 gqa_bs8 qknorm_gqa_bs8 lora mistral7b_down_resid_r16_bf16 llama1b_mlp_block_r16_bf16 qwen05b_norm_lm_head_r16_bf16 gated_mlp_bs1 rmsnorm_linear_bs1"
{
echo "== torch ($C, $(date -u +%T))"
timeout 150 python3 .gpu/torch_baselines.py $CASES --compile-mode default --json "$OUT/torch2.json" 2>&1 | tail -4
for v in D F G D F G; do
  case $v in D) b=$(ls benchD/gpu-* | head -1);; F) b=$(ls benchF/gpu-* | head -1);; G) b=$(ls .gpu/bin/test/gpu-* | head -1);; esac
  echo "== ours $v ($((SECONDS-t0)) s)"
  timeout 60 "$b" --torch "$OUT/torch2.json" --out "/tmp/ours2-$v" --commit "$C-$v" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|MISMATCH|error" | cut -c1-200
done
mkdir -p "$OUT/ours2"; for v in D F G; do cp /tmp/ours2-$v/gpu-bench.json "$OUT/ours2/$v.json"; cp /tmp/ours2-$v/gpu-bench.md "$OUT/ours2/$v.md"; done
echo "== decode ($((SECONDS-t0)) s)"
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- $m 512"
  timeout 50 .gpu/bin/example/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|waiting|megakernel|error|panick" | head -8
done
left=$((530 - SECONDS + t0))
echo "== tests of G ($((SECONDS-t0)) s, $left s left)"
mkdir -p /tmp/runall
OUT=/tmp/runall MIRAGE_BENCH_RUN=0 MIRAGE_DECODE_RUN=0 MIRAGE_SANITIZER_BUDGET_S=80 timeout $((left - 15)) bash scripts/gpu-run-all.sh > /tmp/runall/run-all.txt 2>&1
echo "gpu-run-all exit $? ($((SECONDS-t0)) s)"
sed -n '/==== summary/,$p' /tmp/runall/run-all.txt | grep -vE "^test .*seed|replay with|DeprecationWarning|warnings.warn" | cut -c1-260 | head -70
tail -5 /tmp/runall/run-all.txt
tar -cJf "$OUT/runall.tar.xz" -C /tmp runall
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

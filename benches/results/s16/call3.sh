#!/usr/bin/env bash
# Session 16, device call 3: Nsight Compute (full set, clocks left alone) on the weight-bound
# kernels whose predictions missed: the Qwen LM head r16 (2.6x its floor), rmsnorm_linear_bs1
# (change 38 did not move it), Mistral down + residual r1 and the Llama-1B LM head r1.
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/B.tar.xz').extractall('.')"
bench=$(ls .gpu/bin/test/gpu-* | head -1)
export LD_LIBRARY_PATH=$PWD/.gpu/lib
t0=$SECONDS
prof() { # case, kernel regex, count
  timeout 150 ncu --clock-control none --set full -k "regex:^$2" -c "$3" -f -o "/tmp/$1" "$bench" --iters 2 "$1" > "/tmp/$1.log" 2>&1
  echo "== $1: ncu exit $? ($((SECONDS-t0)) s)"; tail -3 "/tmp/$1.log"
  ncu -i "/tmp/$1.ncu-rep" --page details > "$OUT/$1.txt" 2>&1
  grep -E "^  [a-z_0-9]+_k[0-9]|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Ipc|One or More Eligible|L2 Hit Rate|Stall|stall" "$OUT/$1.txt" | head -40
}
prof qwen05b_norm_lm_head_r16_bf16 qwen05b_norm_lm_head_r16 1
prof rmsnorm_linear_bs1 rmsnorm_linear_bs1 1
prof mistral7b_down_resid_r1_bf16 mistral7b_down_resid_r1 2
prof llama1b_norm_lm_head_r1_bf16 llama1b_norm_lm_head_r1 1
echo "== done ($((SECONDS-t0)) s)"

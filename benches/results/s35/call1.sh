#!/usr/bin/env bash
# Session 35, device call 1: where the 16-row weight streams lose (issues 14 and 23). Times every
# packed candidate of qwen7b_qkv_r16_bf16, qwen7b_down_r16_bf16 and the control
# qwen7b_gateup_r1_bf16 (60 each, .tune/s35a) and of the corpus's llama1b_norm_qkv_r16_bf16 and
# llama1b_down_resid_r16_bf16 (40 each, .tune/s35b), and of a plain 16 x 3584 x 4608 matmul
# (mm16, with split-K candidates; nmm16 = the qkv program again; .tune/s35c), each checked against the CPU reference; then
# ncu (throughput, warp states, source counters) of a few candidates' kernels.
# Then the hand-made variants of .tune/s35v (mirage/examples/s35_variants.rs, not kept: the
# chosen µGraphs with F x2/x4/x8 and tiles /2../8, packed at max_stages 4 and 8), one bundle each.
# Carry .tune/tune, .tune/s35a, .tune/s35b, .tune/s35c, .tune/s35v, .gpu/lib.tar.xz.
set -u
out=${OUT:-/tmp/s35}
mkdir -p "$out/ncu" .tune/lib
tar -xJf .gpu/lib.tar.xz -C .tune/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for b in s35a s35b s35c; do
  timeout 240 .tune/tune measure .tune/$b --out "$out/$b.json" > "$out/$b.txt" 2> "$out/$b.log"
  echo "$b: exit $?"
  grep -iE "not measured|error|mismatch|skipped" "$out/$b.log" | head -10
done
for d in .tune/s35v/*/; do
  n=$(basename "$d")
  timeout 60 .tune/tune measure "$d" --out "$out/v-$n.json" > "$out/v-$n.txt" 2>> "$out/variants.log"
  echo "$n: exit $? $(grep '^| ' "$out/v-$n.txt" | tail -1)"
done
skip_all_but() { local n=$1 keep=$2; seq 0 $((n - 1)) | grep -vxE "$keep" | paste -sd, ; }
prof() {
  local bundle=$1 prog=$2 n=$3 keep=$4 count=$5 tag=$6
  timeout 120 ncu --clock-control none --launch-count "$count" -k "regex:^c($keep)_k" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --metrics dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min \
    .tune/tune measure-program "$bundle" "$prog" --skip "$(skip_all_but "$n" "$keep")" > "$out/ncu/$tag.txt" 2>&1
  echo "$tag: exit $?"
  grep -E "^  c[0-9]+_k|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|dram__bytes|sm__cycles_active" "$out/ncu/$tag.txt" | head -40
}
prof .tune/s35a qwen7b_qkv_r16_bf16 60 "0|1" 2 qkv
prof .tune/s35a qwen7b_down_r16_bf16 60 "0" 2 down
prof .tune/s35a qwen7b_gateup_r1_bf16 60 "0" 1 gateup
prof .tune/s35c mm16 40 "4|5" 4 mm16splitk
cd "$out" && tar -cJf ncu.tar.xz ncu && rm -rf ncu

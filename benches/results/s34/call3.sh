#!/usr/bin/env bash
# Session 34, device call 3: why the fused kernels were slower (call 2). ncu over the first
# launches (the correctness check's) of the decode attention's candidates #0 (split 4, forloop 8)
# and #3 (split 32) and llama1b_down_r16_bf16's #1, unfused (.tune/fuseA: both kernels) and fused
# (.tune/fuseB: one kernel). Carry .tune/tune, .tune/lib, .tune/fuseA, .tune/fuseB.
set -u
out=${OUT:-/tmp/s34}
mkdir -p "$out/ncu"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
skip_all_but() { local n=$1 keep=$2; seq 0 $((n - 1)) | grep -vxE "$keep" | paste -sd, ; }
prof() {
  local bundle=$1 prog=$2 n=$3 keep=$4 count=$5 tag=$6
  ncu --clock-control none --launch-count "$count" -k "regex:^c($keep)_k" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    .tune/tune measure-program "$bundle" "$prog" --skip "$(skip_all_but "$n" "$keep")" > "$out/ncu/$tag.txt" 2>&1
  echo "$tag: exit $?"
  grep -E "^  c[0-9]+_k|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|No Eligible|Stack Size|Local Memory" "$out/ncu/$tag.txt" | head -60
}
prof .tune/fuseA attn_decode_h32_n4096_d128_bf16 4 "0|3" 4 decodeA
prof .tune/fuseB attn_decode_h32_n4096_d128_bf16 4 "0|3" 2 decodeB
prof .tune/fuseA llama1b_down_r16_bf16 3 "1" 2 downA
prof .tune/fuseB llama1b_down_r16_bf16 3 "1" 1 downB
cd "$out" && tar -cJf ncu.tar.xz ncu && rm -rf ncu

#!/usr/bin/env bash
# Session 33, device call 2: ncu over the attention candidates (the bundle of call 1): the
# decode's model choice (#0, split 4) and tuned choice (#3, split 32), and the GQA's tuned #9 —
# both kernels of each, their first launches (the correctness check's). Carry .tune/tune,
# .tune/lib, .tune/attn.
set -u
out=${OUT:-/tmp/s33}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
skip_all_but() { local n=$1 keep=$2; seq 0 $((n - 1)) | grep -vxE "$keep" | paste -sd, ; }
prof() {
  local prog=$1 keep=$2 tag=$3
  ncu --clock-control none --launch-count 4 -k "regex:^c($keep)_k" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    .tune/tune measure-program .tune/attn "$prog" --skip "$(skip_all_but 16 "$keep")" > "$out/ncu-$tag.txt" 2>&1
  echo "$tag: exit $?"
  grep -E "^  c[0-9]+_k|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Shared Memory Configuration Size|Block Limit|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible" "$out/ncu-$tag.txt" | head -80
}
prof attn_decode_h32_n4096_d128_bf16 "0|3" decode
prof attn_gqa_kv8_g4_n4096_d128_bf16 "9" gqa

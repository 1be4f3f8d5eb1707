#!/usr/bin/env bash
# Session 36, device call 2: where the 16-row norm + projection kernels spend their time (issues
# 14 and 23). ncu (full set, source counters; the cubins carry -lineinfo) of qwen7b_qkv_r16_bf16's
# cached one-kernel µGraph (candidate 4) and the norm split-K template's best (candidate 0:
# products [72, 2] F16 + combine), and of llama1b_norm_qkv_r16_bf16's cached µGraph (4) and a
# template (0); per-line stall samples exported as CSV. Carry .tune/tune, .tune/s36p,
# .tune/lib.tar.xz.
set -u
out=${OUT:-/tmp/s36}
mkdir -p "$out" .tune/lib
tar -xJf .tune/lib.tar.xz -C .tune/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ncu --version | tail -1
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 120 .tune/tune measure .tune/s36p --out "$out/s36p.json" > "$out/s36p.txt" 2> "$out/s36p.log"
echo "measure: exit $?"; grep '^| ' "$out/s36p.txt" | tail -4
for prog in qwen7b_qkv_r16_bf16 llama1b_norm_qkv_r16_bf16; do
  timeout 200 ncu --clock-control none --set full --import-source yes --launch-count 3 -k "regex:^c(0|4)_k" \
    -o "$out/$prog" -f .tune/tune measure-program .tune/s36p "$prog" --skip 1,2,3 > "$out/$prog.log" 2>&1
  echo "$prog ncu: exit $?"
  ncu -i "$out/$prog.ncu-rep" --page details > "$out/$prog-details.txt" 2>&1
  grep -E "^  c[0-9]+_k|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per" "$out/$prog-details.txt" | head -30
  ncu -i "$out/$prog.ncu-rep" --page source --csv --print-source sass > "$out/$prog-sass.csv" 2> "$out/$prog-sass.err"
  echo "sass csv: exit $? $(wc -l < "$out/$prog-sass.csv") lines"; head -3 "$out/$prog-sass.err"
  ncu -i "$out/$prog.ncu-rep" --page source --csv --print-source cuda > "$out/$prog-cuda.csv" 2> "$out/$prog-cuda.err"
  echo "cuda csv: exit $? $(wc -l < "$out/$prog-cuda.csv") lines"; head -3 "$out/$prog-cuda.err"
done
cd "$out" && tar -cJf ncu.tar.xz *.ncu-rep *-sass.csv *-cuda.csv && rm -f *.ncu-rep *-sass.csv *-cuda.csv
ls -la "$out"
# compute-sanitizer over the template's kernels (products + combine) and the cached one-kernel
# µGraphs of both programs.
TUNE=.tune/tune timeout 150 bash scripts/sanitize-bundle.sh .tune/s36p "$out/san" llama1b_norm_qkv_r16_bf16 qwen7b_qkv_r16_bf16
echo "sanitize: exit $?"

#!/usr/bin/env bash
# Session 19, device call 1: main's decode (4754c82) profiled. Decode of the three models at
# position 512 with the per-kind profile; then Nsight Compute on one launch of the Llama-3.2-1B
# step (warp states, per-instruction stall samples), and the SASS of its cubin.
set -u
mkdir -p /tmp/d && xz -dc .gpu-bundle/dec0/decode.xz > /tmp/d/decode && chmod +x /tmp/d/decode
t0=$SECONDS
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "== decode $m ($((SECONDS-t0)) s)"
  timeout 60 /tmp/d/decode --random $m --tokens 64 --pos 512 --profile > "$OUT/decode-$m.txt" 2>&1
  grep -E "ms/token|busy|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ " "$OUT/decode-$m.txt" | head -24
done
echo "== ncu ($((SECONDS-t0)) s)"
timeout 240 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters \
  --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats --section Occupancy \
  -k regex:decode_llama -s 4 -c 1 -f -o /tmp/n1 /tmp/d/decode --random llama-3.2-1b --tokens 8 --pos 512 > /tmp/ncu.log 2>&1
echo "ncu exit $?"; tail -3 /tmp/ncu.log
ncu -i /tmp/n1.ncu-rep --page details > "$OUT/ncu-details.txt" 2>&1
grep -E "DRAM Throughput|Duration|Warp Cycles Per Issued|Issued Ipc|One or More Eligible|L2 Hit Rate|Stall|stall|Memory Throughput" "$OUT/ncu-details.txt" | head -30
ncu -i /tmp/n1.ncu-rep --page source --csv --print-source sass > /tmp/src.csv 2> /tmp/src.err; echo "source export exit $? $(wc -l < /tmp/src.csv) lines"; head -c 600 /tmp/src.err
xz -T4 -c /tmp/src.csv > "$OUT/src.csv.xz"
cuobjdump -sass .gpu-bundle/dec0/decode_llama_3_2_1b.cubin > /tmp/sass.txt 2>&1; echo "sass $(wc -l < /tmp/sass.txt) lines"
cuobjdump -res-usage .gpu-bundle/dec0/decode_llama_3_2_1b.cubin 2>&1 | head -20
xz -T4 -c /tmp/sass.txt > "$OUT/sass.txt.xz"
cp /tmp/n1.ncu-rep "$OUT/" 2>/dev/null
echo "== done ($((SECONDS-t0)) s)"

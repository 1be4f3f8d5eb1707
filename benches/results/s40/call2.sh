#!/usr/bin/env bash
# Session 40, device call 2 (same machine as call 1, archive .gpu-s40/c1.tar.xz already
# unpacked or unpacked again): T2's whole mpk_gpu (branch s40-tsum), then ncu (warp-state and
# source counters) of .s40/decodeL (main's 1B and Qwen3 cubins with -lineinfo; sources
# .s40/L_*.cu) for one 8-step launch each. One archive at the end.
set -u
out=${OUT:-/tmp/s40}
mkdir -p "$out/c1"
t0=$SECONDS
budget=${BUDGET:-560}
left() { echo $((budget - SECONDS + t0)); }
[ -x .s40/mpk_gpuT2 ] || tar -xJf .gpu-s40/c1.tar.xz
timeout 220 .s40/mpk_gpuT2 --include-ignored --test-threads=1 --nocapture > "$out/c1/mpk_gpu-T2.txt" 2>&1
echo "mpk_gpu T2: exit $? $(grep -E '^test result' "$out/c1/mpk_gpu-T2.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E "panicked|FAILED" "$out/c1/mpk_gpu-T2.txt" | head -5 | cut -c1-250
mkdir -p /tmp/s40 && cp .s40/L_*.cu /tmp/s40/
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 100 ] || { echo "ncu $m skipped: $(left) s left"; continue; }
  k=decode_$(echo $m | tr '.-' '__')_mpk
  timeout $(( $(left) > 200 ? 150 : $(left) - 40 )) ncu --clock-control none --section WarpStateStats --section SourceCounters \
    --import-source yes -k "regex:^$k" --launch-count 1 -o "$out/c1/ncu-$m" .s40/decodeL --random $m --tokens 8 --pos 512 > "$out/c1/ncu-$m.log" 2>&1
  echo "ncu $m: exit $? ($((SECONDS - t0)) s)"; tail -3 "$out/c1/ncu-$m.log" | cut -c1-200
  ncu -i "$out/c1/ncu-$m.ncu-rep" --page source --csv --print-source cuda > "$out/c1/ncu-$m-cuda.csv" 2> "$out/c1/ncu-$m-cuda.err"
  ncu -i "$out/c1/ncu-$m.ncu-rep" --page details > "$out/c1/ncu-$m-details.txt" 2>&1
  echo "export $m: $(wc -l < "$out/c1/ncu-$m-cuda.csv") lines"
done
cd "$out" && tar -cJf c2.tar.xz c1 && rm -rf c1

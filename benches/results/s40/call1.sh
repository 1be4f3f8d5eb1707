#!/usr/bin/env bash
# Session 40, device call 1 (one call: the device was hard to get). Binaries (carry
# .gpu-s40/c1.tar.xz): .s40/decodeM (main, 12b33b1); .s40/decodeT2 + mpk_gpuT2 (branch
# s40-tsum, DECISIONS change 92: in a norm-folded projection's loop each thread sums its
# squares in a register — one block reduction after the loop — and the CUDA-core matmul
# computes x*g where it reads it: one barrier an iteration instead of three); .s40/decodeT (the
# thread sums alone); .s40/decodeE + mpk_gpu (change E, s39/changeE.patch: Qwen3's gate/up in
# two steps); .s40/decodeL (main's 1B and Qwen3 cubins with -lineinfo, for ncu; sources
# .s40/L_*.cu). In order of need, each step only while the budget allows: T2 against the CPU
# reference (2 steps, 1B and Qwen3) and memcheck of its two-layer models; decode M T2 (E, T)
# alternated at 512; T2's whole mpk_gpu; E's two-layer test and memcheck; T2's profiles; ncu of
# main's 1B step. One archive at the end.
set -u
out=${OUT:-/tmp/s40}
mkdir -p "$out/c1"
t0=$SECONDS
budget=${BUDGET:-540}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s40/c1.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c1/gpu.txt"
for m in llama-3.2-1b qwen3-0.6b; do
  timeout 90 .s40/decodeT2 --random $m --tokens 2 --pos 512 --check 2 > "$out/c1/checkT2-$m.txt" 2>&1
  echo "check T2 $m: exit $? $(grep -c 'matches the CPU' "$out/c1/checkT2-$m.txt") steps match ($((SECONDS - t0)) s)"
  grep -iE "error|mismatch" "$out/c1/checkT2-$m.txt" | head -3 | cut -c1-250
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 .s40/decodeT2 --random $m \
    --layers 2 --tokens 2 --pos 300 > "$out/c1/memcheck-T2-$m.txt" 2>&1
  echo "memcheck T2 $m: exit $? $(grep -E 'ERROR SUMMARY' "$out/c1/memcheck-T2-$m.txt" | head -1) ($((SECONDS - t0)) s)"
done
run() {  # variant model round
  timeout 50 .s40/decode$1 --random $2 --tokens 64 --pos 512 > "$out/c1/decode$1-$2.$3.txt" 2>&1
  echo "decode $1 $2: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/c1/decode$1-$2.$3.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
}
for r in 1 2; do for v in M T2 T; do run $v llama-3.2-1b $r; done; done
for r in 1 2; do for v in M T2 E T; do run $v qwen3-0.6b $r; done; done
timeout $(( $(left) > 260 ? 200 : $(left) - 60 )) .s40/mpk_gpuT2 --include-ignored --test-threads=1 --nocapture > "$out/c1/mpk_gpu-T2.txt" 2>&1
echo "mpk_gpu T2: exit $? $(grep -E '^test result' "$out/c1/mpk_gpu-T2.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E "panicked|FAILED" "$out/c1/mpk_gpu-T2.txt" | head -5 | cut -c1-250
if [ "$(left)" -gt 120 ]; then
  timeout 80 .s40/mpk_gpu --include-ignored --test-threads=1 --nocapture two_layers > "$out/c1/mpk_gpu-E.txt" 2>&1
  echo "mpk_gpu E two_layers: exit $? $(grep -E '^test result' "$out/c1/mpk_gpu-E.txt" | tail -1) ($((SECONDS - t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 .s40/decodeE --random qwen3-0.6b \
    --layers 2 --tokens 2 --pos 300 > "$out/c1/memcheck-E-qwen3.txt" 2>&1
  echo "memcheck E qwen3: exit $? $(grep -E 'ERROR SUMMARY' "$out/c1/memcheck-E-qwen3.txt" | head -1) ($((SECONDS - t0)) s)"
fi
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 60 ] || break
  timeout 40 .s40/decodeT2 --random $m --tokens 64 --pos 512 --profile > "$out/c1/profileT2-$m.txt" 2>&1
  echo "profile T2 $m: exit $? ($((SECONDS - t0)) s)"
  grep -A8 "^profile per operator kind" "$out/c1/profileT2-$m.txt" | cut -c1-100
done
if [ "$(left)" -gt 110 ]; then
  mkdir -p /tmp/s40 && cp .s40/L_*.cu /tmp/s40/
  m=llama-3.2-1b; k=decode_llama_3_2_1b_mpk
  timeout $(( $(left) - 40 )) ncu --clock-control none --section WarpStateStats --section SourceCounters \
    --import-source yes -k "regex:^$k" --launch-count 1 -o "$out/c1/ncu-$m" .s40/decodeL --random $m --tokens 8 --pos 512 > "$out/c1/ncu-$m.log" 2>&1
  echo "ncu $m: exit $? ($((SECONDS - t0)) s)"; tail -3 "$out/c1/ncu-$m.log" | cut -c1-200
  timeout 30 ncu -i "$out/c1/ncu-$m.ncu-rep" --page source --csv --print-source cuda > "$out/c1/ncu-$m-cuda.csv" 2> "$out/c1/ncu-$m-cuda.err"
  timeout 20 ncu -i "$out/c1/ncu-$m.ncu-rep" --page details > "$out/c1/ncu-$m-details.txt" 2>&1
  echo "export $m: $(wc -l < "$out/c1/ncu-$m-cuda.csv") lines"
fi
for f in "$out"/c1/decode*.txt; do echo "$(basename $f): $(grep -E '^tokens:' $f | cut -c1-50)"; done
cd "$out" && tar -cJf c1.tar.xz c1 && rm -rf c1

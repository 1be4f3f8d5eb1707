#!/usr/bin/env bash
# Session 40, device call 1. Binaries (carry .gpu-s40/c1.tar.xz): .s40/decodeM (main, 12b33b1),
# .s40/decodeE + .s40/mpk_gpu (change E, benches/results/s39/changeE.patch: Qwen3's gate/up in
# two steps), .s40/decodeR1 and decodeR2 (main with the 1B's and Qwen3's norm-folded q|k|v and
# gate/up bodies edited by hand, benches/results/s40/rx.py: R1 = the per-iteration warp-0 sum of
# squares and its barrier gone, squares summed in registers by the element-wise pass and reduced
# after the loop; R2 = also no staged x*g tile and its barrier: the matmul reads t0*t1 itself),
# .s40/decodeT (branch s40-tsum: R1 written into the code generator, "thread sums"),
# .s40/decodeT2 + mpk_gpuT2 (T and R2's inlined x*g operand in the code generator). R1/R2 were
# packed but not run (T and T2 replace them).
# Runs: E's two-layer real-width test and memcheck of its two-layer Qwen3; T/T2 against the
# CPU reference (2 steps); decode M T T2 (E) alternated; T2's profiles. call2.sh
# follows on the same machine. One archive at the end.
set -u
out=${OUT:-/tmp/s40}
mkdir -p "$out/c1"
t0=$SECONDS
budget=${BUDGET:-560}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s40/c1.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c1/gpu.txt"
timeout 150 .s40/mpk_gpu --include-ignored --test-threads=1 --nocapture two_layers > "$out/c1/mpk_gpu-E.txt" 2>&1
echo "mpk_gpu E two_layers: exit $? $(grep -E '^test result' "$out/c1/mpk_gpu-E.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E "panicked|FAILED" "$out/c1/mpk_gpu-E.txt" | head -5 | cut -c1-250
MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 .s40/decodeE --random qwen3-0.6b \
  --layers 2 --tokens 2 --pos 300 > "$out/c1/memcheck-E-qwen3.txt" 2>&1
echo "memcheck E qwen3: exit $? $(grep -E 'ERROR SUMMARY' "$out/c1/memcheck-E-qwen3.txt" | head -1) ($((SECONDS - t0)) s)"
for v in T T2; do
  for m in llama-3.2-1b qwen3-0.6b; do
    timeout 90 .s40/decode$v --random $m --tokens 2 --pos 512 --check 2 > "$out/c1/check$v-$m.txt" 2>&1
    echo "check $v $m: exit $? $(grep -c 'matches the CPU' "$out/c1/check$v-$m.txt") steps match ($((SECONDS - t0)) s)"
    grep -iE "error|mismatch" "$out/c1/check$v-$m.txt" | head -3 | cut -c1-250
  done
done
run() {  # variant model
  timeout 50 .s40/decode$1 --random $2 --tokens 64 --pos 512 > "$out/c1/decode$1-$2.$3.txt" 2>&1
  echo "decode $1 $2: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/c1/decode$1-$2.$3.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
}
for r in 1 2; do for v in M T T2; do run $v llama-3.2-1b $r; done; done
for r in 1 2; do for v in M T T2 E; do run $v qwen3-0.6b $r; done; done
for v in T2; do for m in llama-3.2-1b qwen3-0.6b; do
  timeout 40 .s40/decode$v --random $m --tokens 64 --pos 512 --profile > "$out/c1/profile$v-$m.txt" 2>&1
  echo "profile $v $m: exit $? ($((SECONDS - t0)) s)"
  grep -A8 "^profile per operator kind" "$out/c1/profile$v-$m.txt" | cut -c1-100
done; done
for f in "$out"/c1/decode*.txt; do echo "$(basename $f): $(grep -E '^tokens:' $f | cut -c1-50)"; done
cd "$out" && tar -cJf c1.tar.xz c1 && rm -rf c1

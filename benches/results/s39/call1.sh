#!/usr/bin/env bash
# Session 39, device call 1: change 91 (the norm-folded q|k|v projection walked in steps of
# twice the rows: the 1B's 24-column tasks in 4 iterations of 512 rows, not 8 of 256). B = main
# before the change (session 38's decodeB: change 89's megakernels), C = with it, D = C with the
# gate/up projection in the same steps (changeD.patch: 3 stages of 256 rows where 4 of 128
# ran). Decode B C D B C D for Llama-3.2-1B and Qwen3-0.6B, B C for Llama-3.1-8B (random
# weights, 64 tokens, position 512), C's per-kind profiles of the 1B and Qwen3, then C's
# mpk_gpu (at most 220 s), then PyTorch's 1B step in the time left (call 2: the rest).
# Carry .gpu-s38/call2.tar.xz and .gpu-s39/c.tar.xz (.s39/decodeC, decodeD, mpk_gpu). One
# archive at the end.
set -u
out=${OUT:-/tmp/s39}
mkdir -p "$out/c1"
t0=$SECONDS
budget=${BUDGET:-580}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s38/call2.tar.xz
tar -xJf .gpu-s39/c.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c1/gpu.txt"
for m in llama-3.2-1b qwen3-0.6b; do
  for v in B C D B C D; do
    [ "$v" = B ] && bin=.s38/decodeB || bin=.s39/decode$v
    timeout 50 $bin --random $m --tokens 64 --pos 512 > "$out/c1/decode$v-$m.txt" 2>&1
    echo "decode $v $m: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/c1/decode$v-$m.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
  done
done
for m in llama-3.2-1b qwen3-0.6b; do
  timeout 40 .s39/decodeC --random $m --tokens 64 --pos 512 --profile > "$out/c1/decodeC-profile-$m.txt" 2>&1
  echo "profile C $m: exit $? ($((SECONDS - t0)) s)"
  grep -A10 "^profile per operator kind" "$out/c1/decodeC-profile-$m.txt" | cut -c1-100
  grep -A8 "^layer .*operators" "$out/c1/decodeC-profile-$m.txt" | cut -c1-80
done
for v in B C; do
  [ "$v" = B ] && bin=.s38/decodeB || bin=.s39/decode$v
  [ "$(left)" -gt 300 ] || { echo "8B $v skipped: $(left) s left"; continue; }
  timeout 110 $bin --random llama-3.1-8b --tokens 64 --pos 512 > "$out/c1/decode$v-llama-3.1-8b.txt" 2>&1
  echo "decode $v llama-3.1-8b: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/c1/decode$v-llama-3.1-8b.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
done
l=$(left); [ "$l" -gt 240 ] && l=240
timeout $((l - 20)) .s39/mpk_gpu --include-ignored --test-threads=1 --nocapture > "$out/c1/mpk_gpu.txt" 2>&1
echo "mpk_gpu C: exit $? $(grep -E '^test result' "$out/c1/mpk_gpu.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -c "matches the CPU reference" "$out/c1/mpk_gpu.txt"
grep -E "panicked|FAILED" "$out/c1/mpk_gpu.txt" | head -5 | cut -c1-250
l=$(left)
if [ "$l" -gt 60 ]; then
  timeout $((l - 10)) python3 benches/py/decode_baseline.py llama-3.2-1b --pos 512 --json "$out/c1/torch-decode-llama-3.2-1b.json" > "$out/c1/torch-decode-llama-3.2-1b.txt" 2>&1
  echo "torch 1B: exit $? ($((SECONDS - t0)) s)"
  grep -vE "Warning|warn" "$out/c1/torch-decode-llama-3.2-1b.txt" | tail -4 | cut -c1-160
fi
for f in "$out"/c1/decode*.txt; do echo "$(basename $f): $(grep -E '^tokens:' $f | cut -c1-50)"; done
cd "$out" && tar -cJf c1.tar.xz c1 && rm -rf c1

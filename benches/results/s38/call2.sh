#!/usr/bin/env bash
# Session 38, device call 2: change 89 (the q, k and v projections as one operator of equal
# tiles). A = main before the change (the decode example of session 37's pack, 5f7b9d9's
# megakernels), B = with it. First the GPU tests of the megakernel (mpk_gpu, B: the two-layer
# 1B and Qwen3 decoders against the CPU reference), then decode A B A B for Llama-3.2-1B and
# Qwen3-0.6B and A B for Llama-3.1-8B (random weights, 64 tokens, position 512), and B's 1B
# profile. Carry .gpu-s38/call2.tar.xz (.s38/decodeA, .s38/decodeB, .s38/mpk_gpu) and
# .tune/lib.tar.xz. Everything it writes is packed into one archive at the end.
set -u
root=$PWD
out=${OUT:-/tmp/s38}
mkdir -p "$out/c2" .tune/lib
t0=$SECONDS
tar -xJf .gpu-s38/call2.tar.xz
tar -xJf .tune/lib.tar.xz -C .tune/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c2/gpu.txt"
export LD_LIBRARY_PATH="$root/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 150 .s38/mpk_gpu --include-ignored --test-threads=1 --nocapture > "$out/c2/mpk_gpu.txt" 2>&1
echo "mpk_gpu: exit $? $(grep -E '^test result' "$out/c2/mpk_gpu.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E "panicked|FAILED" "$out/c2/mpk_gpu.txt" | head -5 | cut -c1-250
keep='^one launch per token|^64 tokens in one launch|^tokens:'
for m in llama-3.2-1b qwen3-0.6b; do
  for v in A B A B; do
    timeout 50 .s38/decode$v --random $m --tokens 64 --pos 512 > "$out/c2/decode$v-$m.txt" 2>&1
    echo "decode $v $m: exit $? $(grep -E '^one launch per token' "$out/c2/decode$v-$m.txt" | cut -c1-100) ($((SECONDS - t0)) s)"
  done
done
timeout 50 .s38/decodeB --random llama-3.2-1b --tokens 64 --pos 512 --profile > "$out/c2/decodeB-profile-llama.txt" 2>&1
echo "profile: exit $? ($((SECONDS - t0)) s)"
grep -A14 "^profile per operator kind" "$out/c2/decodeB-profile-llama.txt" | cut -c1-100
for v in A B; do
  [ $((SECONDS - t0)) -lt 330 ] || { echo "8B $v skipped: $((SECONDS - t0)) s gone"; continue; }
  timeout 110 .s38/decode$v --random llama-3.1-8b --tokens 64 --pos 512 > "$out/c2/decode$v-llama-3.1-8b.txt" 2>&1
  echo "decode $v llama-3.1-8b: exit $? $(grep -E '^one launch per token' "$out/c2/decode$v-llama-3.1-8b.txt" | cut -c1-100) ($((SECONDS - t0)) s)"
done
for f in "$out"/c2/decode*.txt; do echo "$(basename $f): $(grep -E '^tokens:' $f | cut -c1-60)"; done
cd "$out" && tar -cJf c2.tar.xz c2 && rm -rf c2

#!/usr/bin/env bash
# For the next session with a device (prepared in session 41, not run). Build on a fresh machine
# after `bash scripts/setup.sh`:
#   git checkout main && MIRAGE_DECODE=1 cargo build --release --example decode
#   mkdir -p .s42 .gpu-s42 && cp target/release/examples/decode .s42/decodeT
#   git checkout s41-round && MIRAGE_DECODE=1 cargo build --release --example decode --test mpk_gpu
#   cp target/release/examples/decode .s42/decodeR; cp "$(ls -t target/release/deps/mpk_gpu-* | grep -v '\.d$' | head -1)" .s42/mpk_gpuR
#   git checkout main; echo .s42/ >> .git/info/exclude
#   tar -cJf .gpu-s42/a.tar.xz .s42/decodeT .s42/decodeR .s42/mpk_gpuR   (carry .gpu-s42)
# Runs: change 95 (R) against main (T), Qwen3 and the 1B alternated twice at 512; R's whole
# mpk_gpu and memcheck/racecheck of its two-layer Qwen3; PyTorch's 1B and Qwen3 steps beside;
# the 8B and the 1B at 4096 with the faster of T and R.
set -u
out=${OUT:-/tmp/s42}
mkdir -p "$out/a"
t0=$SECONDS
budget=${BUDGET:-540}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s42/a.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/a/gpu.txt"
run() {  # variant model pos round
  timeout 120 .s42/decode$1 --random $2 --tokens 64 --pos $3 --profile > "$out/a/decode$1-$2-$3.$4.txt" 2>&1
  echo "decode $1 $2 @$3: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/a/decode$1-$2-$3.$4.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
}
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in T R; do run $v $m 512 $r; done; done; done
timeout 150 .s42/mpk_gpuR --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-R.txt" 2>&1
echo "mpk_gpu R: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-R.txt" | tail -1) ($((SECONDS - t0)) s)"
for tool in memcheck racecheck; do
  [ "$(left)" -gt 80 ] || break
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 .s42/decodeR --random qwen3-0.6b --layers 2 --tokens 2 --pos 300 > "$out/a/$tool-R.txt" 2>&1
  echo "$tool R: exit $? $(grep -E 'SUMMARY' "$out/a/$tool-R.txt" | head -1) ($((SECONDS - t0)) s)"
done
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 110 ] || break
  timeout 100 python3 benches/py/decode_baseline.py $m --pos 512 --json "$out/a/torch-decode-$m.json" > "$out/a/torch-decode-$m.txt" 2>&1
  echo "torch $m: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-$m.txt" | tail -3 | cut -c1-160
done
[ "$(left)" -gt 60 ] && run R llama-3.1-8b 512 1
[ "$(left)" -gt 40 ] && run R llama-3.2-1b 4096 1
cd "$out" && tar -cJf a.tar.xz a && rm -rf a

#!/usr/bin/env bash
# For the next session with a device (prepared in session 40, not run). Build on main (change 92
# landed) — on a fresh machine `bash scripts/setup.sh` first:
#   MIRAGE_DECODE=1 cargo build --release --example decode --test mpk_gpu
#   mkdir -p .s41 && cp target/release/examples/decode .s41/decodeT
#   git apply benches/results/s39/changeE.patch
#   MIRAGE_DECODE=1 cargo build --release --example decode --test mpk_gpu
#   cp target/release/examples/decode .s41/decodeET; cp "$(ls -t target/release/deps/mpk_gpu-* | grep -v '\.d$' | head -1)" .s41/mpk_gpuET
#   git checkout mirage/src/mpk/decoder.rs mirage/tests/mpk_fold.rs
#   tar -cJf .gpu-s41/a.tar.xz .s41/decodeT .s41/decodeET .s41/mpk_gpuET   (carry it)
# Runs, each while the budget allows: change 93 on top of 92 (ET): the two-layer real-width
# test, memcheck of its two-layer Qwen3, Qwen3 T ET T ET at 512; the 8B and the 1B with T; PyTorch's
# 1B and Qwen3 steps (decode_baseline.py) beside them; the 1B at 4096; session 40's ncu report
# exported per SASS instruction (it is in the repository). One archive at the end.
set -u
out=${OUT:-/tmp/s41}
mkdir -p "$out/a"
t0=$SECONDS
budget=${BUDGET:-560}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s41/a.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/a/gpu.txt"
timeout 150 .s41/mpk_gpuET --include-ignored --test-threads=1 --nocapture two_layers > "$out/a/mpk_gpu-ET.txt" 2>&1
echo "mpk_gpu ET two_layers: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-ET.txt" | tail -1) ($((SECONDS - t0)) s)"
MIRAGE_MPK_WATCHDOG_MS=600000 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 1 .s41/decodeET --random qwen3-0.6b \
  --layers 2 --tokens 2 --pos 300 > "$out/a/memcheck-ET-qwen3.txt" 2>&1
echo "memcheck ET qwen3: exit $? $(grep -E 'ERROR SUMMARY' "$out/a/memcheck-ET-qwen3.txt" | head -1) ($((SECONDS - t0)) s)"
run() {  # variant model pos round
  timeout 120 .s41/decode$1 --random $2 --tokens 64 --pos $3 > "$out/a/decode$1-$2-$3.$4.txt" 2>&1
  echo "decode $1 $2 @$3: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/a/decode$1-$2-$3.$4.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
}
for r in 1 2; do for v in T ET; do run $v qwen3-0.6b 512 $r; done; done
run T llama-3.2-1b 512 1
[ "$(left)" -gt 200 ] && run T llama-3.1-8b 512 1
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 130 ] || break
  timeout 110 python3 benches/py/decode_baseline.py $m --pos 512 --json "$out/a/torch-decode-$m.json" > "$out/a/torch-decode-$m.txt" 2>&1
  echo "torch $m: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-$m.txt" | tail -3 | cut -c1-160
done
[ "$(left)" -gt 40 ] && run T llama-3.2-1b 4096 1
if [ "$(left)" -gt 30 ]; then
  tar -xJf benches/results/s40/call1/ncu-llama-3.2-1b.tar.xz -C "$out/a"
  timeout 25 ncu -i "$out/a/ncu-llama-3.2-1b.ncu-rep" --page source --csv --print-source sass > "$out/a/ncu-1b-sass.csv" 2> "$out/a/ncu-1b-sass.err"
  echo "ncu export: $(wc -l < "$out/a/ncu-1b-sass.csv") lines"; rm -f "$out/a/ncu-llama-3.2-1b.ncu-rep"
fi
cd "$out" && tar -cJf a.tar.xz a && rm -rf a

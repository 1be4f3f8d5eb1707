#!/usr/bin/env bash
# Session 26's device call (not run: no device was lent in session 26; run it in a later one):
# change 66, the megakernel's weights of tasks narrower than 64 columns stored tile by tile.
# R = main's decode (every weight row-major, the default), T = the same commit built with
# MIRAGE_DECODE_CONTIGUOUS_BELOW=64 (the 16- and 32-column tiles contiguous), A = built with 129
# (every projection, the 64-column gate/up and 128-column LM heads too). First T's correctness:
# its mpk_gpu tests (the test-mode graph `layer_contiguous` and the two-layer 1B and Qwen3 built
# tile by tile, against the CPU), the two-layer 1B, Qwen3 and 8B decoding the CPU reference's
# tokens, memcheck of T's two-layer 1B, A's two-layer 1B against the CPU; then R T A R T A on the
# 1B and Qwen3 and R T R T on the 8B at position 512 (64 tokens, one launch per token), the
# profile of T on the 1B and T at 4096 as time allows. About 550 s.
#
# Bundles (on the build machine, from the repo root; carry all three):
#   for v in R:0 T:64 A:129; do b=${v%%:*}; c=${v#*:}
#     MIRAGE_DECODE=1 MIRAGE_DECODE_CONTIGUOUS_BELOW=$c cargo build --release --example decode
#     MIRAGE_DECODE=1 MIRAGE_DECODE_CONTIGUOUS_BELOW=$c cargo test --release --test mpk_gpu --no-run
#     mkdir bench$b; cp target/release/examples/decode bench$b/
#     cp $(ls -t target/release/deps/mpk_gpu-* | grep -v '\.d$' | head -1) bench$b/mpk_gpu
#     strip bench$b/*; git rev-parse --short=12 HEAD > bench$b/COMMIT
#     mkdir -p .gpu-bundle; tar cJf .gpu-bundle/$b.tar.xz bench$b; rm -rf bench$b
#   done
# then one device call: `bash benches/results/s26/call1.sh` with carry [".gpu-bundle"].
set -u
python3 - <<'PY'
import tarfile
for b in ("R", "T", "A"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call1.txt
keep="ms/token|busy|error|panick|matches|mismatch|differ"
{
echo "commit R $(cat benchR/COMMIT), T $(cat benchT/COMMIT), A $(cat benchA/COMMIT)"
echo "-- mpk_gpu tests of T ($((SECONDS-t0)) s)"
timeout 200 benchT/mpk_gpu --ignored --test-threads=1 --nocapture > "$OUT/mpk_gpuT.txt" 2>&1
echo "exit $?"; grep -E "^test |test result|match|agree|panick" "$OUT/mpk_gpuT.txt" | head -20
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- T $m 2 layers against the CPU reference ($((SECONDS-t0)) s)"
  timeout 150 benchT/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > "$OUT/checkT-$m.txt" 2>&1
  echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkT-$m.txt" | head -6
done
echo "-- memcheck T llama-3.2-1b 2 layers, 2 tokens ($((SECONDS-t0)) s)"
MIRAGE_MPK_WATCHDOG_MS=600000 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
  benchT/decode --random llama-3.2-1b --layers 2 --tokens 2 --pos 300 > "$OUT/memcheckT.txt" 2>&1
echo "memcheck exit $?"; grep -E "ERROR SUMMARY|$keep" "$OUT/memcheckT.txt" | tail -3
echo "-- A llama-3.2-1b 2 layers against the CPU reference ($((SECONDS-t0)) s)"
timeout 150 benchA/decode --random llama-3.2-1b --layers 2 --tokens 3 --pos 300 --check 3 > "$OUT/checkA.txt" 2>&1
echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkA.txt" | head -6
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  order="R T A R T A"; [ $m = llama-3.1-8b ] && order="R T R T"
  for b in $order; do
    left=$((585 - SECONDS + t0)); [ $left -gt 60 ] || { echo "$b $m: not run (time)"; continue; }
    echo "-- $b $m pos 512 ($((SECONDS-t0)) s)"
    timeout 80 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -3
  done
done
left=$((585 - SECONDS + t0)); [ $left -gt 60 ] && {
echo "-- T llama-3.2-1b pos 512 profile ($((SECONDS-t0)) s)"
timeout 100 benchT/decode --random llama-3.2-1b --tokens 64 --pos 512 --profile > "$OUT/decodeT-1b-512.txt" 2>&1
grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeT-1b-512.txt" | head -34
}
for m in llama-3.2-1b qwen3-0.6b; do
  left=$((585 - SECONDS + t0)); [ $left -gt 60 ] || { echo "T $m 4096: not run (time)"; continue; }
  echo "-- T $m pos 4096 ($((SECONDS-t0)) s)"
  timeout 80 benchT/decode --random $m --tokens 64 --pos 4096 2>&1 | grep -E "$keep" | head -3
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tar -cJf "$OUT/call1-logs.tar.xz" -C "$OUT" $(cd "$OUT" && ls decodeT-*.txt checkT-*.txt checkA.txt mpk_gpuT.txt memcheckT.txt) 2>/dev/null
tail -c 12000 "$log"

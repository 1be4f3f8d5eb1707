#!/usr/bin/env bash
# Session 16, device call 1: the GPU test suite (sanitizer included) on binaries of main with
# changes 38 (CUDA-core matmuls for any multiple of 8 columns) and 39 (the next stage's copies
# after the loop's first barrier), then the three decode models at position 512 (ours).
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/B.tar.xz').extractall('.')"
C=$(cat .gpu/COMMIT)
t0=$SECONDS
log=$OUT/call1.txt
{
echo "== tests of $C ($(date -u +%T))"
mkdir -p /tmp/runall
OUT=/tmp/runall MIRAGE_BENCH_RUN=0 MIRAGE_DECODE_RUN=0 MIRAGE_SANITIZER_BUDGET_S=120 timeout 400 bash scripts/gpu-run-all.sh > /tmp/runall/run-all.txt 2>&1
echo "gpu-run-all exit $? ($((SECONDS-t0)) s)"
sed -n '/==== summary/,$p' /tmp/runall/run-all.txt | grep -vE "^test .*seed|replay with|DeprecationWarning|warnings.warn" | cut -c1-260 | head -70
tar -cJf "$OUT/runall.tar.xz" -C /tmp runall
export LD_LIBRARY_PATH=$PWD/.gpu/lib
echo "== decode ($((SECONDS-t0)) s)"
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  echo "-- $m 512"
  timeout 50 .gpu/bin/example/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|waiting|megakernel|error|panick" | head -8
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

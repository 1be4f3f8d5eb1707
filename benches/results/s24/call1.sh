#!/usr/bin/env bash
# Session 24, device call 1: the bench's `dims` group with change 62 (the default bucket ladder
# doubles past 8: attention over S built as twelve default buckets) beside PyTorch's attention over S of the same call, then compute-sanitizer
# memcheck over the same group (every program at every size, 2 launches) and the root package's
# GPU tests of S-sized attention and bucketed launchers (`mugraph`), plain and under memcheck.
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/dims.tar.xz').extractall('.')"
C=$(cat benchD/COMMIT); D=$(date -u +%F)
log=$OUT/call1.txt
t0=$SECONDS
{
echo "== torch dims, $(date -u +%T)"
timeout 90 python3 benchD/torch_baselines.py --set dims --compile-mode default --json "$OUT/torch-dims.json" 2>&1 | tail -8
echo "== ours dims, $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 300 benchD/gpu --out "$OUT/ours" --commit "$C" --date "$D" --torch "$OUT/torch-dims.json" dims 2>&1 | grep -v "^test\|seed" | tail -60
echo "== memcheck dims (2 launches per size), $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 benchD/gpu --iters 2 dims > "$OUT/memcheck.txt" 2>&1; echo "memcheck exit $?"
tail -5 "$OUT/memcheck.txt"
echo "== mugraph tests (S-sized attention, buckets), $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 120 benchD/mugraph --ignored --test-threads 1 s_sized bucketed 2>&1 | grep -E "^test |test result" | tail -12
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 benchD/mugraph --ignored --test-threads 1 s_sized bucketed > "$OUT/memcheck-mugraph.txt" 2>&1; echo "memcheck mugraph exit $?"
grep -E "test result|ERROR SUMMARY" "$OUT/memcheck-mugraph.txt" | tail -3
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

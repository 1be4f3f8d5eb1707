#!/usr/bin/env bash
# Session 24's device call (not run: no device was lent in session 24; run it in a later one).
# The bench's `dims` group with change 62 (the default bucket ladder doubles past 8: attention over
# S built as twelve default buckets) and change 63 (split-K over a runtime-sized batch: the gated
# MLP's 17..=32 and 33..=48 buckets are two-kernel split-K) beside PyTorch's attention over S of the
# same call, then compute-sanitizer memcheck over the same group (every program at every size, 2
# launches), the root package's GPU tests of S-sized attention and bucketed launchers (`mugraph`),
# and mirage-rs's split-K-over-B GPU test (`dims_stacked`), plain and under memcheck.
#
# Bundle (on the build machine, from the repo root):
#   MIRAGE_DIMS_BENCH=1 cargo build --release --bench gpu
#   MIRAGE_DIMS_BENCH=1 cargo test --release --test mugraph --no-run
#   cargo test --release -p mirage-rs --features build --test dims_stacked --no-run
#   mkdir benchD; cp target/release/deps/{gpu,mugraph,dims_stacked}-<newest> benchD/{gpu,mugraph,dims_stacked}
#   strip benchD/*; cp benches/py/torch_baselines.py benchD/; git rev-parse --short=12 HEAD > benchD/COMMIT
#   mkdir -p .gpu-bundle; tar cJf .gpu-bundle/dims.tar.xz benchD; rm -rf benchD
# then one device call: `bash benches/results/s24/call1.sh` with carry [".gpu-bundle"].
# (dims_stacked compiles its kernels with nvcc at run time: the device machine needs nvcc, as
# for the `dims_gpu` tests; skip that step if it has none.)
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
echo "== split-K over B (dims_stacked), $(date -u +%T) ($((SECONDS-t0)) s)"
timeout 120 benchD/dims_stacked --ignored --nocapture --test-threads 1 2>&1 | grep -E "B = |^test |test result" | tail -24
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 benchD/dims_stacked --ignored --test-threads 1 > "$OUT/memcheck-stacked.txt" 2>&1; echo "memcheck dims_stacked exit $?"
grep -E "test result|ERROR SUMMARY" "$OUT/memcheck-stacked.txt" | tail -3
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11000 "$log"

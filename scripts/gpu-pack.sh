#!/usr/bin/env bash
# Builds everything the H200 run needs into .gpu/ (ignored by git): the test binaries that
# scripts/gpu-run-all.sh runs there (golden_gpu, mpk_gpu, mugraph, random_gpu, runtime_gpu, search,
# fingerprint, dims_gpu, the gpu bench; others with --only), the example binaries and the gpu bench (../shared/gpu/pack),
# the random programs (.gpu/random.tar.xz: 320 programs of mirage::testing::random built, verified
# and checked in the f32 reference here, cubins for sm_90a only, with their chosen µGraphs;
# MIRAGE_RANDOM_SEEDS=a..b packs others), the PyTorch and Triton anchors (benches/py: the
# benchmark and generality sets), and the commit being measured. Then, on the GPU machine,
# from the repository root: `bash scripts/gpu-run-all.sh` (tests, examples, benchmark),
# `bash scripts/gpu-bench.sh` (the benchmark) or `bash .gpu/run-tests` (the packed tests).
#
#   scripts/gpu-pack.sh [--only PREFIX,...] [cargo args]     MIRAGE_SHARED=path overrides ../shared
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
shared=${MIRAGE_SHARED:-$root/../shared}
only=(--only golden_gpu,mpk_gpu,mugraph,random_gpu,runtime_gpu,search,fingerprint,gpu,dims_gpu,codegen_compile,model)
for a in "$@"; do
  case "$a" in --only | --only=*) only=() ;; esac
done
# The GPU bench binary only (`--benches` would add the criterion benches, one of them named
# `search` like the test binary the run script expects to find alone).
"$shared/gpu/pack" --examples --bench gpu "${only[@]}" "$@"
# Built with the examples but not run there: the CLI, the golden-file tool, the Triton packer
# (scripts/triton-pack.sh runs it here) and the tuner (scripts/tune-pack.sh carries it in .tune).
# A device call carries 64 MiB at most.
rm -rf .gpu/bin/bin .gpu/bin/example/golden .gpu/bin/example/triton_pack .gpu/bin/example/tune
# Symbol tables are not needed there either (a backtrace loses function names, not line of failure).
find .gpu/bin -type f -exec strip --strip-all {} +
# The random programs: built by the pack test of mirage/tests/random_programs.rs (which also
# checks each chosen µGraph against its program in the f32 reference), compressed with xz
# (about 2 MB for 320 programs; gzip would take twice that).
random_dir=$(mktemp -d)
MIRAGE_CUDA_ARCHS=sm_90a MIRAGE_RANDOM_PACK="$random_dir/random" cargo test --release -p mirage-rs --features testing \
  --test random_programs -- --ignored --exact pack_random_programs_for_the_gpu --nocapture
tar -cJf .gpu/random.tar.xz -C "$random_dir" random
rm -rf "$random_dir"
du -sh .gpu/random.tar.xz | sed 's/^/random programs: /'
du -sh .gpu | sed 's/^/packed, stripped: /'
# Test binaries that link the search link libz3, which the GPU machine lacks: carry it
# (compressed; scripts/gpu-run-all.sh unpacks it and sets LD_LIBRARY_PATH).
libdir=$(mktemp -d)
for lib in $(ldd .gpu/bin/test/* 2>/dev/null | awk '/libz3/ {print $3}' | sort -u); do cp -L "$lib" "$libdir/"; done
tar -cJf .gpu/lib.tar.xz -C "$libdir" .
rm -rf "$libdir"
# The README's quick start, built as a user would (a crate outside the workspace, release).
CARGO_TARGET_DIR="$root/target" MIRAGE_OFFLINE=1 cargo build --release --offline --manifest-path fixtures/quickstart/Cargo.toml
cp target/release/quickstart .gpu/quickstart
strip --strip-all .gpu/quickstart
cp benches/py/torch_baselines.py benches/py/triton_fused.py benches/py/decode_baseline.py .gpu/
commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- . ':!.gpu' || commit="$commit+uncommitted"
echo "$commit" > .gpu/COMMIT
echo "packed commit $commit"

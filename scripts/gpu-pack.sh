#!/usr/bin/env bash
# Builds everything the H200 run needs into .gpu/ (ignored by git): the test binaries that
# scripts/gpu-run-all.sh runs there (golden_gpu, mpk_gpu, mugraph, runtime_gpu, search, the gpu bench;
# others with --only), the example binaries and the gpu bench (../shared/gpu/pack), the PyTorch
# and Triton anchors (benches/py: the benchmark and generality sets), and the commit being
# measured. Then, on the GPU machine,
# from the repository root: `bash scripts/gpu-run-all.sh` (tests, examples, benchmark),
# `bash scripts/gpu-bench.sh` (the benchmark) or `bash .gpu/run-tests` (the packed tests).
#
#   scripts/gpu-pack.sh [--only PREFIX,...] [cargo args]     MIRAGE_SHARED=path overrides ../shared
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
shared=${MIRAGE_SHARED:-$root/../shared}
only=(--only golden_gpu,mpk_gpu,mugraph,runtime_gpu,search,gpu)
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
du -sh .gpu | sed 's/^/packed, stripped: /'
cp benches/py/torch_baselines.py benches/py/triton_fused.py .gpu/
commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- . ':!.gpu' || commit="$commit+uncommitted"
echo "$commit" > .gpu/COMMIT
echo "packed commit $commit"

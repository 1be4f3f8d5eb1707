#!/usr/bin/env bash
# Builds everything the H200 run needs into .gpu/ (ignored by git): the test binaries that
# scripts/gpu-run-all.sh runs there (golden_gpu, mpk_gpu, mugraph, runtime_gpu, search; others with
# --only), the example and bench binaries (../shared/gpu/pack --examples --benches), the PyTorch
# and Triton anchors of ../shared/bench, and the commit being measured. Then, on the GPU machine,
# from the repository root: `bash scripts/gpu-run-all.sh` (tests, examples, benchmark),
# `bash scripts/gpu-bench.sh` (the benchmark) or `bash .gpu/run-tests` (the packed tests).
#
#   scripts/gpu-pack.sh [--only PREFIX,...] [cargo args]     MIRAGE_SHARED=path overrides ../shared
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
shared=${MIRAGE_SHARED:-$root/../shared}
only=(--only golden_gpu,mpk_gpu,mugraph,runtime_gpu,search)
for a in "$@"; do
  case "$a" in --only | --only=*) only=() ;; esac
done
"$shared/gpu/pack" --examples --benches "${only[@]}" "$@"
cp "$shared/bench/torch_baselines.py" "$shared/bench/triton_fused.py" .gpu/
commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- . ':!.gpu' || commit="$commit+uncommitted"
echo "$commit" > .gpu/COMMIT
echo "packed commit $commit"

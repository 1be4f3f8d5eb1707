#!/usr/bin/env bash
# Writes .gpu/triton/ (ignored by git) for the Triton check on the GPU machine: one Triton module
# per µGraph (the chosen µGraph of every benchmark program, every golden program and Mirage
# µGraph, the coverage programs with rope, gather and argmax), the CPU reference's outputs on
# seeded inputs (raw f32) with mirage::testing::compare's tolerances, the manifest, and the runner
# scripts/triton_check.py. There, from the repository root, one call checks every module and,
# with `--bench` (after scripts/gpu-pack.sh here, which packs the PyTorch anchors and our bench
# binary), writes the table of Triton beside our CUDA kernels and PyTorch of the same run to
# $OUT/triton-bench.md:
#
#   python3 .gpu/triton/triton_check.py .gpu/triton --jobs 16 --json $OUT/triton.json --bench $OUT
#
#   scripts/triton-pack.sh [--groups bench,golden,coverage]
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
rm -rf .gpu/triton
mkdir -p .gpu/triton
cargo run --release -q -p mirage-rs-cli --example triton_pack -- .gpu/triton "$@"
cp scripts/triton_check.py .gpu/triton/
du -sh .gpu/triton

#!/usr/bin/env bash
# Writes .gpu/triton/ (ignored by git) for the Triton check on the GPU machine: one Triton module
# per µGraph (the chosen µGraph of every benchmark program, every golden program and Mirage
# µGraph, the coverage programs), the CPU reference's outputs on seeded inputs (raw f32), the
# manifest, and the runner scripts/triton_check.py. There, from the repository root:
#
#   python3 .gpu/triton/triton_check.py .gpu/triton [--only REGEX] [--time bench]
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

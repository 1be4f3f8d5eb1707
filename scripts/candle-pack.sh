#!/usr/bin/env bash
# Builds mirage-candle's GPU run into .gpu-candle/ (ignored by git): the example `candle_mlp` (a
# candle MLP block with mirage's gated MLP swapped in, against candle's own ops) and the crate's
# test binary, stripped and compressed, plus the commit. candle's CUDA backend compiles its
# kernels with nvcc (~40 min on two cores the first time) and links the CUDA libraries: the link
# root comes from scripts/install-cuda-link.sh. On the GPU machine, from the repository root:
#
#   bash scripts/gpu-candle.sh        (device call: carry [".gpu-candle"])
#
#   scripts/candle-pack.sh [cargo args]
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
# The link root reads cudarc's driver bindings from cargo's registry copy: fetch them first.
cargo fetch --manifest-path mirage-candle/Cargo.toml
eval "$(bash scripts/install-cuda-link.sh)"
out=.gpu-candle
rm -rf "$out" && mkdir -p "$out/bin"
cd mirage-candle
cargo build --release --example candle_mlp "$@"
cp target/release/examples/candle_mlp "../$out/bin/candle_mlp"
tests=$(cargo test --release --test candle --no-run --message-format=json "$@" |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "candle":
        print(m["executable"])')
cp "$tests" "../$out/bin/candle_tests"
cd ..
strip --strip-all "$out"/bin/*
tar -cJf "$out/candle.tar.xz" -C "$out" bin && rm -rf "$out/bin"
commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- . ':!.gpu-candle' || commit="$commit+uncommitted"
echo "$commit" > "$out/COMMIT"
du -sh "$out/candle.tar.xz" | sed 's/^/packed: /'

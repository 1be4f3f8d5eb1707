#!/usr/bin/env bash
# Packs an offline tuning run (mirage::tune, the `tune` example) into .tune/ (ignored by git):
# builds the example in release mode, packs the candidates of every benchmark program
# (examples/kernels/mod.rs) and of the generality set (benches/kernels/generality.rs) into
# .tune/bundle (one cubin per program, launch plans, manifest, the candidates' µGraphs) and copies
# the binary to .tune/tune. Packing is resumable: programs already in the bundle are kept.
#
#   scripts/tune-pack.sh [--only SUBSTRING,...] [--candidates K]
#
# Then on the GPU machine, from the repository root with .tune carried along:
#   bash scripts/gpu-tune.sh                 (writes $OUT/tune.json)
# and back here, with that file:
#   cargo run --release -p mirage-rs --features build --example tune -- import .tune/bundle tune.json
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.tune/' "$exclude" 2>/dev/null || echo '/.tune/' >> "$exclude"
cargo build --release -p mirage-rs --features build --example tune
mkdir -p .tune
cp target/release/examples/tune .tune/tune
strip --strip-debug .tune/tune 2>/dev/null || true
# The binary links libz3 (the search's z3 pruner); the GPU machine has none: carry ours.
mkdir -p .tune/lib
for lib in $(ldd .tune/tune | awk '/libz3/ {print $3}'); do cp -L "$lib" .tune/lib/; done
.tune/tune pack --out .tune/bundle "$@" examples/kernels/mod.rs benches/kernels/generality.rs
du -sh .tune | sed 's/^/tuning run: /'
size_kb=$(du -sk .tune | cut -f1)
if [ "$size_kb" -gt 56000 ]; then
  echo "warning: .tune is $((size_kb / 1024)) MiB; a device call carries at most 64 MiB with the working tree." >&2
  echo "         Pack fewer programs (--only) into separate bundles." >&2
fi

#!/usr/bin/env bash
# The test command of the README: the mechanical style checks (rustfmt, clippy with warnings as
# errors), then every CPU test of the workspace (GPU tests are ignored here and run on a GPU
# machine: scripts/gpu-pack.sh, then scripts/gpu-run-all.sh there), then the API docs of the
# published crates with warnings as errors, then what a user of the published crates does:
# `cargo package` of every crate (mirage-candle's too) (offline, without the verification build,
# which needs crates.io), the README's quick start (fixtures/quickstart/, a crate outside the
# workspace) built and run, and a crate using mirage next to candle's cudarc features
# (fixtures/with-candle-cudarc/) checked. The fixtures share the workspace's target directory,
# so they reuse its compiled dependencies. Each step prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
# A CI run builds once from clean: incremental-compilation state would only cost disk and time.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
# Cargo runs the workspace's build script (which compiles every test kernel with nvcc) once for
# clippy and once for the tests, each in its own $OUT_DIR: one shared nvcc cache compiles each
# kernel once (content-addressed, so it is safe to share).
export MIRAGE_NVCC_CACHE_DIR="${MIRAGE_NVCC_CACHE_DIR:-$PWD/target/nvcc-cache}"
step() {
  local what=$1 start=$SECONDS
  shift
  echo "==== $what: $*"
  "$@"
  echo "==== $what: ok in $((SECONDS - start)) s"
}
step format cargo fmt --all --check
# mirage-candle is a workspace of its own (candle's CUDA build is too long for CI: its README):
# its sources are format-checked here, built and tested by scripts/candle-pack.sh.
step format-candle rustfmt --edition 2024 --check $(git ls-files 'mirage-candle/*.rs')
step lints cargo clippy --workspace --all-targets --all-features -- -D warnings
step tests cargo test --workspace --all-features --no-fail-fast
# The API docs of the published crates. The workspace's own package (src/lib.rs: three lines of
# module docs) is left out: documenting it runs its build script (every test kernel searched,
# verified and compiled, about 5 minutes) a third time, with the features of a doc build.
step docs env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --exclude mirage-workspace --no-deps --all-features
step package cargo package --workspace --exclude mirage-workspace --no-verify --offline --allow-dirty
# mirage-rs-candle's package, against the workspace's unpublished crates (patched in; online:
# candle's index entries are not in a CI machine's offline cache).
step package-candle cargo package --manifest-path mirage-candle/Cargo.toml -p mirage-rs-candle --no-verify --allow-dirty \
  --config "patch.crates-io.mirage-rs-runtime.path=\"$PWD/mirage-runtime\"" --config "patch.crates-io.mirage-rs-core.path=\"$PWD/mirage-core\""
target="$PWD/target"
step quickstart env CARGO_TARGET_DIR="$target" MIRAGE_OFFLINE=1 cargo run --offline --manifest-path fixtures/quickstart/Cargo.toml
# cudarc's `cuda-version-from-build-system` asks `nvcc --version` on PATH; where nvcc is not on
# PATH (the wheel install), tell cudarc the version it would find.
command -v nvcc >/dev/null || export CUDARC_CUDA_VERSION=13000
step candle-cudarc env CARGO_TARGET_DIR="$target" cargo check --offline --manifest-path fixtures/with-candle-cudarc/Cargo.toml
echo "==== target directory: $(du -sh "$target" 2>/dev/null | cut -f1) on disk; $(df -h . | awk 'NR==2 {print $4}') free"

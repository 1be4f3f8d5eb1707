#!/usr/bin/env bash
# The test command of the README: the mechanical style checks (rustfmt, clippy with warnings as
# errors), then every CPU test of the
# workspace (GPU tests are ignored here and run on a GPU machine: scripts/gpu-pack.sh, then
# scripts/gpu-run-all.sh there), then the API docs with warnings as errors. Each step prints how
# long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
step() {
  local what=$1 start=$SECONDS
  shift
  echo "==== $what: $*"
  "$@"
  echo "==== $what: ok in $((SECONDS - start)) s"
}
step format cargo fmt --all --check
step lints cargo clippy --workspace --all-targets --all-features -- -D warnings
step tests cargo test --workspace --all-features --no-fail-fast
step docs env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

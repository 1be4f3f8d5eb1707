#!/usr/bin/env bash
# The test command of the README: every CPU test of the workspace (GPU tests are ignored here and
# run on a GPU machine through ../shared/gpu/pack).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-features --no-fail-fast

#!/usr/bin/env bash
# Regenerates the README's picture: the gated MLP's chosen µGraph (batch 8), from the committed
# search cache, drawn by Graphviz (scripts/setup.sh installs it).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
cargo run --release -q -p mirage-rs-cli -- show examples/kernels/mod.rs::gated_mlp_bs8 --offline --svg docs/img/gated_mlp.svg

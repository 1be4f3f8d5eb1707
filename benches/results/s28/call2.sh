#!/usr/bin/env bash
# Session 28's second device call: issue 16's `dims` group with change 68 (the bench's gated MLP
# buckets gain a bound at 24: 17..=24 is the fixed B = 17's one-kernel family), with session 24's
# script (benches/results/s24/call1.sh: torch attention over S, our dims group, memcheck over it,
# the S-sized and bucketed GPU tests, split-K over B) — this time with libz3 carried for
# dims_stacked (session 28's first call could not load it) — then, on the same card, the models'
# default decode (T: session 26's contiguous_below 64 build = main's default) at position 512 and
# PyTorch's decode step (decode_baseline.py) beside it, as the time left allows.
# Bundles: .gpu-bundle/dims.tar.xz (s24/call1.sh's recipe, plus `mkdir benchD/lib; cp
# /lib/x86_64-linux-gnu/libz3.so.4 benchD/lib/`), .gpu-bundle/T.tar.xz. carry [".gpu-bundle"].
set -u
t0=$SECONDS
budget=${BUDGET:-560}
ok() { [ $((budget - SECONDS + t0)) -gt "$1" ]; }
export LD_LIBRARY_PATH="$PWD/benchD/lib:${LD_LIBRARY_PATH:-}"
bash benches/results/s24/call1.sh
python3 -c "import tarfile; tarfile.open('.gpu-bundle/T.tar.xz').extractall('.')"
echo "== T decode, commit $(cat benchT/COMMIT) ($((SECONDS - t0)) s)"
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  ok 40 || { echo "T $m: not run (time)"; continue; }
  echo "-- T $m pos 512 ($((SECONDS - t0)) s)"
  timeout 60 benchT/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|error|panick" | head -2
done
for m in llama-3.2-1b qwen3-0.6b; do
  ok 160 || { echo "torch $m: not run (time)"; continue; }
  echo "-- torch $m pos 512 ($((SECONDS - t0)) s)"
  timeout 170 python3 benches/py/decode_baseline.py $m --pos 512 --json "$OUT/torch-decode-$m.json" 2>&1 | grep -vE "Warning|warn" | tail -6
done
echo "== done ($((SECONDS - t0)) s)"

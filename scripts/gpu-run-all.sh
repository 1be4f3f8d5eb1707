#!/usr/bin/env bash
# One H200 call (after scripts/gpu-pack.sh here), from the repository root: the GPU tests that
# check generated code (golden µGraphs, coverage programs, #[mugraph] launchers), every example
# against the CPU reference, then the benchmark with the PyTorch and Triton anchors
# (scripts/gpu-bench.sh). Logs and results go to $OUT (or benches/results/latest).
#
#   bash scripts/gpu-run-all.sh
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-benches/results/latest}
mkdir -p "$out"
status=0
for t in .gpu/bin/test/golden_gpu-* .gpu/bin/test/mugraph-* .gpu/bin/test/runtime_gpu-*; do
  [ -x "$t" ] || continue
  echo "== $(basename "$t")"
  timeout 300 "$t" --include-ignored --test-threads=1 --nocapture > "$out/test-$(basename "$t" | cut -d- -f1).txt" 2>&1 || status=1
  grep -E "^test |test result|passed on the GPU|generated programs passed|panicked" "$out/test-$(basename "$t" | cut -d- -f1).txt" | tail -12
done
for e in .gpu/bin/example/*; do
  [ -x "$e" ] || continue
  [ "$(basename "$e")" = golden ] && continue
  echo "== example $(basename "$e")"
  timeout 120 "$e" > "$out/example-$(basename "$e").txt" 2>&1 || status=1
  grep -E "^[a-z_0-9]+\(|relative L2|time: median|Error|error" "$out/example-$(basename "$e").txt"
done
OUT="$out" bash scripts/gpu-bench.sh 2>&1 | tail -32 || status=1
exit $status

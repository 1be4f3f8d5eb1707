#!/usr/bin/env bash
# One H200 call (after scripts/gpu-pack.sh here), from the repository root: the GPU tests that
# check generated code (golden µGraphs, coverage programs, #[mugraph] launchers, runtime), every
# example against the CPU reference, then the benchmark with the PyTorch and Triton anchors
# (scripts/gpu-bench.sh). Full logs go to $OUT (or benches/results/latest) in few files (the
# device tool returns only a handful); the last lines printed are the summary: every test
# binary's result line and the benchmark table, so a tail of the output shows both.
#
#   bash scripts/gpu-run-all.sh
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-benches/results/latest}
mkdir -p "$out"
status=0
summary=""
: > "$out/tests.txt"
for t in .gpu/bin/test/golden_gpu-* .gpu/bin/test/mugraph-* .gpu/bin/test/runtime_gpu-*; do
  [ -x "$t" ] || continue
  name=$(basename "$t" | cut -d- -f1)
  echo "== $name" >> "$out/tests.txt"
  if timeout 300 "$t" --include-ignored --test-threads=1 --nocapture >> "$out/tests.txt" 2>&1; then rc=0; else rc=$?; status=1; fi
  summary+="$name (exit $rc): $(grep -E '^test result' "$out/tests.txt" | tail -1)"$'\n'
  summary+="$(awk -v n="== $name" '$0==n{p=1;next} /^== /{p=0} p' "$out/tests.txt" | grep -E 'passed on the GPU|generated programs passed|panicked|FAILED' | head -5)"$'\n'
done
: > "$out/examples.txt"
for e in .gpu/bin/example/*; do
  [ -x "$e" ] || continue
  [ "$(basename "$e")" = golden ] && continue
  echo "== example $(basename "$e")" >> "$out/examples.txt"
  if ! timeout 120 "$e" >> "$out/examples.txt" 2>&1; then status=1; summary+="example $(basename "$e") FAILED"$'\n'; fi
done
summary+="examples: $(grep -c 'relative L2 error' "$out/examples.txt") outputs checked against the CPU reference"$'\n'
OUT="$out" bash scripts/gpu-bench.sh > "$out/bench.txt" 2>&1 || status=1
echo "==== summary (exit status $status)"
printf '%s' "$summary"
grep -E '^gpu bench|^\| ' "$out/bench.txt"
exit $status

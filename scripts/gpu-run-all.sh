#!/usr/bin/env bash
# One H200 call (after scripts/gpu-pack.sh here), from the repository root: the GPU tests that
# check generated code (golden µGraphs, coverage programs, #[mugraph] launchers, runtime), the
# slow batch-8 attention search test (it wants the 16 cores there), every example against the CPU
# reference, then the benchmark with the PyTorch and Triton anchors (scripts/gpu-bench.sh). Full
# logs go to $OUT (or benches/results/latest) in few files (the device tool returns only a
# handful); the last lines printed are the summary: every expected binary's result (a missing one
# is a failure), the worst element error per element type of each GPU test, and the benchmark
# table. Exits non-zero when anything failed or is missing.
#
#   bash scripts/gpu-run-all.sh          MIRAGE_TEST_SEED=N replays the random inputs of a run;
#                                        MIRAGE_SANITIZER_LIMIT_S bounds each sanitizer run (300)
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-benches/results/latest}
mkdir -p "$out"
status=0
summary=""
note() { summary+="$1"$'\n'; }
fail() {
  status=1
  note "FAILED: $1"
}

# run_test NAME SECONDS ARGS...: the packed test binary NAME-<hash> with ARGS, logged to tests.txt.
: > "$out/tests.txt"
run_test() {
  local name=$1 limit=$2
  shift 2
  local bins=()
  for b in .gpu/bin/test/"$name"-*; do [ -x "$b" ] && bins+=("$b"); done
  if [ "${#bins[@]}" -ne 1 ]; then
    fail "$name: expected one test binary .gpu/bin/test/$name-*, found ${#bins[@]} (scripts/gpu-pack.sh packs them)"
    return
  fi
  echo "== $name $*" >> "$out/tests.txt"
  local log
  log=$(mktemp)
  timeout "$limit" "${bins[0]}" "$@" --test-threads=1 --nocapture > "$log" 2>&1
  local rc=$?
  cat "$log" >> "$out/tests.txt"
  [ "$rc" -eq 0 ] || fail "$name (exit $rc$([ "$rc" -eq 124 ] && echo ", timed out after ${limit} s"))"
  note "$name: $(grep -E '^test result' "$log" | tail -1)"
  # The seed of each randomized test, the worst element error per element type, what failed.
  summary+="$(grep -E ': seed [0-9]+ \(replay|worst element error per element type|^  (f16|bf16|f32): |panicked|^test .* FAILED' "$log" | cut -c1-400)"$'\n'
  rm -f "$log"
}
run_test golden_gpu 600 --include-ignored
run_test mugraph 300 --include-ignored
run_test runtime_gpu 300 --include-ignored
run_test mpk_gpu 300 --include-ignored
summary+="$(grep -E '^overhead_|^toy: .* match the CPU reference|agree bit for bit|^watchdog: ' "$out/tests.txt" | cut -c1-200)"$'\n'
run_test search 600 --ignored --exact batch_8_attention_gets_at_most_two_kernels

: > "$out/examples.txt"
for name in gated_mlp rmsnorm_linear gqa qknorm_gqa ntrans lora; do
  e=.gpu/bin/example/$name
  if [ ! -x "$e" ]; then
    fail "example $name: no binary $e (scripts/gpu-pack.sh packs the examples)"
    continue
  fi
  echo "== example $name" >> "$out/examples.txt"
  if timeout 300 "$e" >> "$out/examples.txt" 2>&1; then rc=0; else rc=$?; fi
  [ "$rc" -eq 0 ] || fail "example $name (exit $rc)"
done
note "examples: $(grep -c '^  output [0-9]*: ' "$out/examples.txt") outputs checked against the CPU reference, $(grep -c 'MISMATCH' "$out/examples.txt") mismatched"

# The persistent megakernel's two-layer toy decoder: 64 tokens; then 8 tokens under
# compute-sanitizer's memcheck and racecheck (with a watchdog bound the tools' slowdown fits in).
: > "$out/mpk_toy.txt"
e=.gpu/bin/example/mpk_toy
if [ -x "$e" ]; then
  { timeout 120 "$e" "$out/mpk_toy_trace.json" 64 || fail "example mpk_toy (exit $?)"; } >> "$out/mpk_toy.txt" 2>&1
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool mpk_toy (8 tokens)" >> "$out/mpk_toy.txt"
    MIRAGE_MPK_WATCHDOG_MS=600000 timeout "${MIRAGE_SANITIZER_LIMIT_S:-300}" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$e" "$out/mpk_toy_sanitized.json" 8 >> "$out/mpk_toy.txt" 2>&1 || fail "compute-sanitizer --tool $tool mpk_toy (exit $?)"
  done
  note "mpk_toy: $(grep -E 'tokens in one launch|ERROR SUMMARY|RACECHECK SUMMARY' "$out/mpk_toy.txt" | tr '\n' ';')"
else
  fail "example mpk_toy: no binary $e (scripts/gpu-pack.sh packs the examples)"
fi

OUT="$out" bash scripts/gpu-bench.sh > "$out/bench.txt" 2>&1 || fail "benchmark (scripts/gpu-bench.sh, log in $out/bench.txt)"
echo "==== summary (exit status $status)"
printf '%s' "$summary"
grep -E '^gpu bench|^\| ' "$out/bench.txt"
exit $status

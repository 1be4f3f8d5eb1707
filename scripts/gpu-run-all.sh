#!/usr/bin/env bash
# One H200 call (after scripts/gpu-pack.sh here), from the repository root: the GPU tests that
# check generated code (golden µGraphs, coverage programs, #[mugraph] launchers, runtime), the
# slow batch-8 attention search test (it wants the 16 cores there), every golden candidate
# fingerprinted at the real shapes, every example against the CPU reference, then the benchmark
# with the PyTorch and Triton anchors (scripts/gpu-bench.sh). Full logs go to $OUT (or
# benches/results/latest) in few files (the device tool returns only a handful); the last lines
# printed are the summary: every expected binary's result (a missing one is a failure), the
# worst element error per element type of each GPU test, and the benchmark table. Exits
# non-zero when anything failed or is missing.
#
# Then compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the generated kernels,
# failing on any report (see "compute-sanitizer stage" below for what the default run covers).
#
#   bash scripts/gpu-run-all.sh          MIRAGE_TEST_SEED=N replays the random inputs of a run;
#                                        MIRAGE_SANITIZER_LIMIT_S bounds each sanitizer run (300);
#                                        MIRAGE_SANITIZER=full: every tool over every kernel
#                                        (golden, coverage, random, #[mugraph] tests, examples);
#                                        MIRAGE_SANITIZER=off skips the stage (said in the summary);
#                                        MIRAGE_SANITIZER_BUDGET_S bounds the default stage (150)
#                                        MIRAGE_DECODE_RUN=0 skips the decode example's models
#                                        MIRAGE_BENCH_RUN=0 skips the benchmark (said in the summary)
#                                        MIRAGE_TESTS_RUN=0 skips the tests, examples and toy
#                                        before the sanitizer (said in the summary)
#                                        MIRAGE_SANITIZER_TOOLS="racecheck initcheck": the full
#                                        mode's tools (default all four; for splitting it over
#                                        device calls)
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

# libz3 (test binaries that link the search link it), carried by scripts/gpu-pack.sh: the GPU
# machine has none.
if [ -f .gpu/lib.tar.xz ]; then
  mkdir -p .gpu/lib && tar -xJf .gpu/lib.tar.xz -C .gpu/lib
  export LD_LIBRARY_PATH="$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
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
tests_run=${MIRAGE_TESTS_RUN:-1}
[ "$tests_run" = 0 ] && note "tests, examples, quick start and toy: not run (MIRAGE_TESTS_RUN=0)"
[ "$tests_run" = 0 ] || {
run_test golden_gpu 600 --include-ignored
run_test mugraph 300 --include-ignored
run_test runtime_gpu 300 --include-ignored
run_test mpk_gpu 300 --include-ignored
# Runtime-sized dims: the gated MLP over B at 12 sizes, then its timing against fixed builds.
run_test dims_gpu 300 --include-ignored
summary+="$(grep -E '^B = |^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$out/tests.txt" | cut -c1-200)"$'\n'
# The golden µGraphs compiled for sm_80 (CI compiles them for sm_90a and the coverage programs for both).
run_test codegen_compile 600 --ignored --exact golden_kernels_compile_for_sm80
summary+="$(grep -E '^overhead_|^toy: .* match the CPU reference|agree bit for bit|^watchdog: ' "$out/tests.txt" | cut -c1-200)"$'\n'
# The README's quick start (fixtures/quickstart, a crate outside the workspace), built by
# scripts/gpu-pack.sh: what a new user runs first.
if [ -x .gpu/quickstart ]; then
  if qs=$(timeout 120 .gpu/quickstart 2>&1); then note "quickstart: ${qs//$'\n'/; }"; else fail "quickstart: $qs"; fi
else
  fail "quickstart: no .gpu/quickstart (scripts/gpu-pack.sh builds it)"
fi
run_test search 600 --ignored --exact batch_8_attention_gets_at_most_two_kernels
# Every golden candidate at the real shapes (CI verifies one in eight; this is the whole sweep).
run_test fingerprint 600 --ignored --exact every_golden_candidate_verifies_at_the_real_shapes
}
# The random programs (mirage::testing::random), built and packed by scripts/gpu-pack.sh.
export MIRAGE_RANDOM_PACK=.gpu/random
rm -rf "$MIRAGE_RANDOM_PACK"
# Python's tarfile unpacks it (xz may not be installed there; Python is).
if python3 -m tarfile -e .gpu/random.tar.xz .gpu; then
  [ "$tests_run" = 0 ] || run_test random_gpu 300 --include-ignored
  summary+="$(grep -E '^random programs: ' "$out/tests.txt" | tail -1)"$'\n'
  # Each mismatch's first line (program, output, input seed, worst element, tolerances); the
  # worst elements, the storage-rounded values and the program follow it in tests.txt.
  summary+="$(grep -E '^MISMATCH random_' "$out/tests.txt" | head -20 | cut -c1-600)"$'\n'
else
  fail "random_gpu: cannot unpack .gpu/random.tar.xz (scripts/gpu-pack.sh packs it)"
fi

: > "$out/examples.txt"
[ "$tests_run" = 0 ] || {
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
    log=$(mktemp)
    MIRAGE_MPK_WATCHDOG_MS=600000 timeout "${MIRAGE_SANITIZER_LIMIT_S:-300}" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$e" "$out/mpk_toy_sanitized.json" 8 > "$log" 2>&1 || fail "compute-sanitizer --tool $tool mpk_toy (exit $?)"
    cat "$log" >> "$out/mpk_toy.txt"
    # Racecheck's hazards are warnings (exit 0): any reported hazard fails the run too.
    if grep -qE '(ERROR|RACECHECK) SUMMARY: [1-9]' "$log"; then
      fail "compute-sanitizer --tool $tool mpk_toy: $(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -1)"
    fi
    rm -f "$log"
  done
  note "mpk_toy: $(grep -E 'tokens in one launch|ERROR SUMMARY|RACECHECK SUMMARY' "$out/mpk_toy.txt" | tr '\n' ';')"
else
  fail "example mpk_toy: no binary $e (scripts/gpu-pack.sh packs the examples)"
fi
}

# Greedy decoding of the three benchmark models with random weights (examples/decode.rs; the
# pack must be built with MIRAGE_DECODE=1, or the example says their megakernels are missing):
# 64 tokens from positions 512 and 4096, ms/token and share of the copy bandwidth.
: > "$out/decode.txt"
e=.gpu/bin/example/decode
if [ "${MIRAGE_DECODE_RUN:-1}" = 0 ]; then
  note "decode: skipped (MIRAGE_DECODE_RUN=0; run the example on its own)"
elif [ "$tests_run" = 0 ]; then
  note "decode: not run (MIRAGE_TESTS_RUN=0)"
elif [ -x "$e" ]; then
  for model in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
    for pos in 512 4096; do
      echo "== decode --random $model --tokens 64 --pos $pos" >> "$out/decode.txt"
      timeout 300 "$e" --random "$model" --tokens 64 --pos "$pos" >> "$out/decode.txt" 2>&1 \
        || fail "example decode --random $model --pos $pos (exit $?)"
    done
  done
  note "decode: $(grep -E '^== decode|ms/token' "$out/decode.txt" | cut -c1-160 | tr '\n' ';')"
else
  fail "example decode: no binary $e (scripts/gpu-pack.sh packs the examples; MIRAGE_DECODE=1 builds its models)"
fi

# compute-sanitizer stage: each run is a packed test binary or example under one tool, with
# --error-exitcode 1; a run fails on a non-zero exit, on any error or hazard in the tool's
# summary, and on a timeout (MIRAGE_SANITIZER_LIMIT_S, since a run cut short did not check
# everything). The default stage, in this order until MIRAGE_SANITIZER_BUDGET_S is spent (runs
# not started are listed in the summary, never silently dropped):
#   memcheck over the #[mugraph] launchers with a runtime-sized dim at 12 sizes (odd ones among
#   them): the gated MLP over B and attention over S;
#   memcheck over all random programs and all coverage programs (f16, bf16, f32);
#   racecheck, synccheck and initcheck over the coverage programs and the first 60 random ones;
#   memcheck over the examples (the benchmark programs through #[mugraph]).
# MIRAGE_SANITIZER=full: all four tools over the golden µGraphs (three runs of a third each), the coverage programs, all
# random programs, the #[mugraph] launcher tests and every example, with no stage budget.
: > "$out/sanitizer.txt"
sanitizer_mode=${MIRAGE_SANITIZER:-quick}
sanitizer_limit=${MIRAGE_SANITIZER_LIMIT_S:-300}
sanitizer_budget=${MIRAGE_SANITIZER_BUDGET_S:-150}
sanitizer_start=$SECONDS
sanitizer_runs=0
# The examples check their outputs without timing them under the tools (110 launches, each
# after an L2 flush, take minutes under racecheck).
export MIRAGE_EXAMPLE_TIMING=0
sanitizer_skipped=()
# sanitize TOOL LABEL EXECUTABLE ARGS...: one run, logged to sanitizer.txt.
sanitize() {
  local tool=$1 label=$2 exe=$3
  shift 3
  if [ "$sanitizer_mode" != full ] && [ $((SECONDS - sanitizer_start)) -ge "$sanitizer_budget" ]; then
    sanitizer_skipped+=("$tool:$label")
    return
  fi
  if [ ! -x "$exe" ]; then
    fail "compute-sanitizer $tool $label: no binary $exe (scripts/gpu-pack.sh packs it)"
    return
  fi
  local log
  log=$(mktemp)
  echo "== compute-sanitizer --tool $tool $label" >> "$out/sanitizer.txt"
  local t0=$SECONDS
  timeout "$sanitizer_limit" compute-sanitizer --tool "$tool" --error-exitcode 1 "$exe" "$@" > "$log" 2>&1
  local rc=$?
  cat "$log" >> "$out/sanitizer.txt"
  sanitizer_runs=$((sanitizer_runs + 1))
  local found
  found=$(grep -E '(ERROR|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY' "$log" | tail -1)
  if [ "$rc" -ne 0 ] || grep -qE '(ERROR|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY: [1-9]' "$log" || [ -z "$found" ]; then
    fail "compute-sanitizer $tool $label (exit $rc$([ "$rc" -eq 124 ] && echo ", timed out after ${sanitizer_limit} s"); ${found:-no summary}; log in $out/sanitizer.txt)"
  fi
  note "sanitizer $tool $label: ${found:-no summary} ($((SECONDS - t0)) s)"
  rm -f "$log"
}
# The single packed binary of test NAME.
test_bin() {
  local b
  for b in .gpu/bin/test/"$1"-*; do [ -x "$b" ] && echo "$b" && return; done
  echo ".gpu/bin/test/$1-(missing)"
}
tests=(--test-threads=1 --nocapture)
coverage=("$(test_bin golden_gpu)" --ignored --exact coverage_kernels_match_the_reference_on_the_gpu "${tests[@]}")
golden=("$(test_bin golden_gpu)" --ignored --exact golden_kernels_match_the_reference_on_the_gpu "${tests[@]}")
random=("$(test_bin random_gpu)" --ignored "${tests[@]}")
examples=(gated_mlp rmsnorm_linear gqa qknorm_gqa ntrans lora)
case "$sanitizer_mode" in
  off) note "sanitizer: not run (MIRAGE_SANITIZER=off)" ;;
  full)
    for tool in ${MIRAGE_SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}; do
      sanitize "$tool" random "${random[@]}"
      sanitize "$tool" coverage "${coverage[@]}"
      # The golden µGraphs in three parts: racecheck over all 190 takes more than 300 s.
      for part in 1/3 2/3 3/3; do MIRAGE_GOLDEN_PART=$part sanitize "$tool" "golden (part $part)" "${golden[@]}"; done
      sanitize "$tool" mugraph "$(test_bin mugraph)" --include-ignored "${tests[@]}"
      for name in "${examples[@]}"; do sanitize "$tool" "example $name" ".gpu/bin/example/$name"; done
    done
    ;;
  *)
    # Runtime-sized dims first (a dozen launches, seconds): the B-sized gated MLP at 12 sizes,
    # the odd ones (1, 3, 5, 17, 31, 33, 63) cutting its tiles' loads and stores.
    sanitize memcheck "dims (B at 12 sizes)" "$(test_bin mugraph)" --ignored --exact a_sized_launcher_matches_the_reference_at_twelve_sizes "${tests[@]}"
    # Attention over a runtime key length S at 12 sizes (masked loops and reductions, split-KV
    # ranges that follow S).
    sanitize memcheck "attention over S (12 sizes)" "$(test_bin mugraph)" --ignored --exact an_s_sized_attention_matches_the_reference_at_twelve_sizes "${tests[@]}"
    sanitize memcheck random "${random[@]}"
    sanitize memcheck coverage "${coverage[@]}"
    for tool in racecheck synccheck initcheck; do
      sanitize "$tool" coverage "${coverage[@]}"
      MIRAGE_RANDOM_LIMIT=60 sanitize "$tool" "random (first 60)" "${random[@]}"
    done
    for name in "${examples[@]}"; do sanitize memcheck "example $name" ".gpu/bin/example/$name"; done
    ;;
esac
[ "$sanitizer_mode" = full ] && note "sanitizer (full) tools: ${MIRAGE_SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}"
note "sanitizer ($sanitizer_mode): $sanitizer_runs runs in $((SECONDS - sanitizer_start)) s$([ "${#sanitizer_skipped[@]}" -gt 0 ] && echo "; NOT RUN (stage budget ${sanitizer_budget} s spent): ${sanitizer_skipped[*]}")"

if [ "${MIRAGE_BENCH_RUN:-1}" = 0 ]; then
  note "benchmark: not run (MIRAGE_BENCH_RUN=0)"
  : > "$out/bench.txt"
else
  OUT="$out" bash scripts/gpu-bench.sh > "$out/bench.txt" 2>&1 || fail "benchmark (scripts/gpu-bench.sh, log in $out/bench.txt)"
fi
echo "==== summary (exit status $status)"
printf '%s' "$summary"
grep -E '^gpu bench|^\| ' "$out/bench.txt"
exit $status

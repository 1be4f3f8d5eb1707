#!/usr/bin/env bash
# Session 15, device call 3: the launch-path tests after s15-align (pointer alignment checked
# before launch): golden, mugraph (incl. the misaligned-view tests), runtime, dims, random,
# examples, quick start; memcheck over the two misaligned-view tests. Logs to $OUT.
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/all2.tar.xz').extractall('.')"
mkdir -p .gpu/lib && python3 -m tarfile -e .gpu/lib.tar.xz .gpu/lib 2>/dev/null
export LD_LIBRARY_PATH=$PWD/.gpu/lib
log=$OUT/call3.txt
export MIRAGE_RANDOM_PACK=.gpu/random
python3 -m tarfile -e .gpu/random.tar.xz .gpu 2>/dev/null
t0=$SECONDS
{
cat .gpu/COMMIT
for t in golden_gpu mugraph runtime_gpu dims_gpu random_gpu; do
  b=$(ls .gpu/bin/test/$t-* | head -1)
  echo "== $t ($((SECONDS-t0)) s)"
  timeout 200 "$b" --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|MISMATCH|random programs:" | grep -v "\.\.\. ok$" | tail -25
done
for ex in gated_mlp rmsnorm_linear gqa qknorm_gqa ntrans lora; do
  echo "== example $ex"; timeout 60 .gpu/bin/example/$ex 2>&1 | grep -cE "^  output [0-9]+: " ; timeout 60 .gpu/bin/example/$ex >/dev/null 2>&1; echo "exit $?"
done
echo "== quickstart"; timeout 60 .gpu/quickstart 2>&1 | tail -2
b=$(ls .gpu/bin/test/mugraph-* | head -1)
for t in a_misaligned_view_is_an_error_and_the_context_still_works an_s_sized_attention_reads_a_misaligned_key_view_through_windows an_s_sized_attention_matches_the_reference_at_twelve_sizes; do
  echo "== memcheck $t"; timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 "$b" --ignored --exact $t 2>&1 | grep -E "test result|ERROR SUMMARY|panicked"
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
cat "$log" | cut -c1-400 | tail -c 11000

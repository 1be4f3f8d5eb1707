#!/usr/bin/env bash
# Session 29, device call 1: change 69 (decode attention: the chunk's cached rows copied into
# shared memory before the task's dependency wait, the angles and gains computed there; the
# ticket taken by one acquire-release atomic after a barrier instead of a fence in every thread).
# N = main with change 69, T = session 27's build of 1c38579 (main's decode before it: the same
# code otherwise). N's mpk_gpu tests (two-layer 1B and Qwen3 at 509.. and at 4154.., where
# chunks are longer than the early rows), two-layer models against the CPU reference at 300 and
# 4100, memcheck of N's two-layer 1B and Qwen3, then T N T N at position 512 (1B, Qwen3), T N at
# 4096 and for the 8B, then N's and T's profiles (1B, Qwen3).
# Bundles (build machine, repo root): for N
#   MIRAGE_DECODE=1 cargo build --release --example decode
#   MIRAGE_DECODE=1 cargo test --release --test mpk_gpu --no-run
#   mkdir benchN; cp target/release/examples/decode benchN/
#   cp $(ls -t target/release/deps/mpk_gpu-* | grep -v '\.d$' | head -1) benchN/mpk_gpu
#   strip benchN/*; git rev-parse --short=12 HEAD > benchN/COMMIT; tar cJf .gpu-bundle/N.tar.xz benchN
# T: benches/results/s27/call3.sh's recipe at 1c38579. carry [".gpu-bundle"].
set -u
t0=$SECONDS
budget=${BUDGET:-560}
python3 - <<'PY'
import tarfile
for b in ("T", "N"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
ok() { [ $((budget - SECONDS + t0)) -gt "$1" ]; }
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== T $(cat benchT/COMMIT), N $(cat benchN/COMMIT)"
echo "-- N mpk_gpu ($((SECONDS - t0)) s)"
timeout 200 benchN/mpk_gpu --ignored --test-threads=1 --nocapture > "$OUT/mpk_gpuN.txt" 2>&1
echo "exit $?"; grep -E "^test |test result|panick|pos 41[0-9][0-9]" "$OUT/mpk_gpuN.txt" | head -30
for mp in llama-3.2-1b:300 qwen3-0.6b:300 llama-3.2-1b:4100 qwen3-0.6b:4100 llama-3.1-8b:4100; do
  m=${mp%%:*}; pos=${mp##*:}
  ok 60 || { echo "N $m check $pos: not run (time)"; continue; }
  echo "-- N $m 2 layers at $pos against the CPU reference ($((SECONDS - t0)) s)"
  timeout 90 benchN/decode --random $m --layers 2 --tokens 3 --pos $pos --check 3 > "$OUT/checkN-$m-$pos.txt" 2>&1
  echo "exit $?"; grep -E "$keep|step [0-9]:" "$OUT/checkN-$m-$pos.txt" | head -5
done
for m in llama-3.2-1b qwen3-0.6b; do
  ok 90 || { echo "memcheck N $m: not run (time)"; continue; }
  echo "-- memcheck N $m 2 layers ($((SECONDS - t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 80 compute-sanitizer --tool memcheck --error-exitcode 1 \
    benchN/decode --random $m --layers 2 --tokens 2 --pos 4150 > "$OUT/memcheckN-$m.txt" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY" "$OUT/memcheckN-$m.txt" | tail -2
done
for mp in llama-3.2-1b:512 qwen3-0.6b:512; do
  m=${mp%%:*}; pos=${mp##*:}
  for b in T N T N; do
    ok 25 || { echo "$b $m $pos: not run (time)"; continue; }
    echo "-- $b $m pos $pos ($((SECONDS - t0)) s)"
    timeout 40 bench$b/decode --random $m --tokens 64 --pos $pos 2>&1 | grep -E "$keep" | head -2
  done
done
for mp in llama-3.2-1b:4096 qwen3-0.6b:4096 llama-3.1-8b:512; do
  m=${mp%%:*}; pos=${mp##*:}
  for b in T N; do
    ok 30 || { echo "$b $m $pos: not run (time)"; continue; }
    echo "-- $b $m pos $pos ($((SECONDS - t0)) s)"
    timeout 50 bench$b/decode --random $m --tokens 64 --pos $pos 2>&1 | grep -E "$keep" | head -2
  done
done
for mb in llama-3.2-1b:N qwen3-0.6b:N llama-3.2-1b:T qwen3-0.6b:T; do
  m=${mb%%:*}; b=${mb##*:}
  ok 25 || { echo "$b $m profile: not run (time)"; continue; }
  echo "-- $b $m pos 512 profile ($((SECONDS - t0)) s)"
  timeout 40 bench$b/decode --random $m --tokens 64 --pos 512 --profile > "$OUT/decode$b-$m-512.txt" 2>&1
  grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^  l(8|14)\." "$OUT/decode$b-$m-512.txt" | head -24
done
echo "== done ($((SECONDS - t0)) s)"

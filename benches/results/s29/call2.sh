#!/usr/bin/env bash
# Session 29, device call 2: change 69 second version (N2: the early part only issues the
# cp.async copies of the cached rows and the L2 prefetch; the gains and angles load in the body's
# first round again, as in T) against T (1c38579). N2's mpk_gpu tests, memcheck of its two-layer
# 1B at 4150, the 8B's two layers at 4100 against the CPU, T N2 T N2 at 512 (1B, Qwen3), N2's
# Qwen3 and 1B profiles. Bundle N2: call1.sh's recipe with benchN2. carry [".gpu-bundle"].
set -u
t0=$SECONDS
budget=${BUDGET:-400}
python3 - <<'PY'
import tarfile
for b in ("T", "N2"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
ok() { [ $((budget - SECONDS + t0)) -gt "$1" ]; }
mkdir -p logs
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== T $(cat benchT/COMMIT), N2 $(cat benchN2/COMMIT)"
for mp in llama-3.2-1b:512 qwen3-0.6b:512; do
  m=${mp%%:*}; pos=${mp##*:}
  for b in T N2 T N2; do
    echo "-- $b $m pos $pos ($((SECONDS - t0)) s)"
    timeout 40 bench$b/decode --random $m --tokens 64 --pos $pos 2>&1 | grep -E "$keep" | head -1
  done
done
for m in qwen3-0.6b llama-3.2-1b; do
  ok 25 || { echo "N2 $m profile: not run (time)"; continue; }
  echo "-- N2 $m pos 512 profile ($((SECONDS - t0)) s)"
  timeout 40 benchN2/decode --random $m --tokens 64 --pos 512 --profile > logs/decodeN2-$m-512.txt 2>&1
  grep -E "^  (attention|o_proj.k0|qkv.k0|mlp.k0) +[0-9]+ +[0-9]+ |^  l(8|14)\.(attention|o_proj)" logs/decodeN2-$m-512.txt | head -8
done
echo "-- N2 mpk_gpu ($((SECONDS - t0)) s)"
timeout 200 benchN2/mpk_gpu --ignored --test-threads=1 --nocapture > logs/mpk_gpuN2.txt 2>&1
echo "exit $?"; grep -E "^test |test result|panick" logs/mpk_gpuN2.txt | head -12
grep -cE "pos 41[0-9][0-9]: token .* matches" logs/mpk_gpuN2.txt
if ok 70; then
  echo "-- memcheck N2 llama-3.2-1b 2 layers at 4150 ($((SECONDS - t0)) s)"
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 80 compute-sanitizer --tool memcheck --error-exitcode 1 \
    benchN2/decode --random llama-3.2-1b --layers 2 --tokens 2 --pos 4150 > logs/memcheckN2.txt 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY" logs/memcheckN2.txt | tail -1
fi
tar cJf "$OUT/call2-logs.tar.xz" logs
echo "== done ($((SECONDS - t0)) s)"

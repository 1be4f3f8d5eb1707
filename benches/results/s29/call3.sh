#!/usr/bin/env bash
# Session 29, device call 3: change 70 (A = main with it, change 69 reverted: Qwen3's argmax in 128
# tiles) against T (1c38579). T A T A on Qwen3 at 512, T A on the 1B (same graph: a control), A's
# two-layer Qwen3 against the CPU, A's mpk_gpu (the near-capacity steps on main's attention code),
# A's Qwen3 profile. Bundle A: call1.sh's recipe with benchA. carry [".gpu-bundle"].
set -u
t0=$SECONDS
python3 - <<'PY'
import tarfile
for b in ("T", "A"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
mkdir -p logs
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== T $(cat benchT/COMMIT), A $(cat benchA/COMMIT)"
for mb in qwen3-0.6b:T qwen3-0.6b:A qwen3-0.6b:T qwen3-0.6b:A llama-3.2-1b:T llama-3.2-1b:A; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
  timeout 40 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -1
done
echo "-- A qwen3-0.6b 2 layers against the CPU ($((SECONDS - t0)) s)"
timeout 60 benchA/decode --random qwen3-0.6b --layers 2 --tokens 3 --pos 300 --check 3 > logs/checkA-qwen3.txt 2>&1
echo "exit $?"; grep -E "$keep|step [0-9]:" logs/checkA-qwen3.txt | head -4
for b in A T; do
  echo "-- $b qwen3-0.6b pos 512 profile ($((SECONDS - t0)) s)"
  timeout 40 bench$b/decode --random qwen3-0.6b --tokens 64 --pos 512 --profile > logs/decode$b-qwen3-512.txt 2>&1
  grep -E "^  (logits.k0|argmax|next_token) +[0-9]+ +[0-9]+ |busy" logs/decode$b-qwen3-512.txt | head -6
done
echo "-- A mpk_gpu ($((SECONDS - t0)) s)"
timeout 200 benchA/mpk_gpu --ignored --test-threads=1 --nocapture > logs/mpk_gpuA.txt 2>&1
echo "exit $?"; grep -E "test result|panick" logs/mpk_gpuA.txt | head -4
grep -cE "pos 41[0-9][0-9]: token .* matches" logs/mpk_gpuA.txt
tar cJf "$OUT/call3-logs.tar.xz" logs
echo "== done ($((SECONDS - t0)) s)"

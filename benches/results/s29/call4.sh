#!/usr/bin/env bash
# Session 29, device call 4: change 71 (an LM head whose vocabulary no tile width divides padded
# to a multiple of 128 columns; the argmax stops at the vocabulary). B = main with it. B's
# mpk_gpu tests (every test graph against the CPU, layer_vocab_1001 among them; the real-width
# two layers at 509.. and 4154..), then T B on the 1B and Qwen3 at 512 (the 1B's graph is T's:
# a control of the argmax template's extra argument; Qwen3's has change 70 besides). Bundle B: call1.sh's recipe with benchB.
# carry [".gpu-bundle"].
set -u
t0=$SECONDS
python3 - <<'PY'
import tarfile
for b in ("T", "B"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
mkdir -p logs
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== T $(cat benchT/COMMIT), B $(cat benchB/COMMIT)"
echo "-- B mpk_gpu ($((SECONDS - t0)) s)"
timeout 240 benchB/mpk_gpu --ignored --test-threads=1 --nocapture > logs/mpk_gpuB.txt 2>&1
echo "exit $?"; grep -E "test result|panick|vocab_1001" logs/mpk_gpuB.txt | head -6
grep -cE "pos 41[0-9][0-9]: token .* matches" logs/mpk_gpuB.txt
for mb in llama-3.2-1b:T llama-3.2-1b:B qwen3-0.6b:T qwen3-0.6b:B; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
  timeout 40 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|error|panick" | head -1
done
tar cJf "$OUT/call4-logs.tar.xz" logs
echo "== done ($((SECONDS - t0)) s)"

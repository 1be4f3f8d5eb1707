#!/usr/bin/env bash
# Session 30, device call 3: change 74 (the decode attention loads each thread's first four
# value vectors of a key tile with its key rows, one dependent round fewer before P·V). B =
# main's decode (12cf3f1's code), V = main + change 74. B V B V on the 1B and Qwen3 at 512, B V
# at 4096; V's two-layer 1B and Qwen3 against the CPU; V's profiles (B's: calls 1-2); V's mpk_gpu.
# carry [".gpu-bundle"].
set -u
t0=$SECONDS
python3 - <<'PY'
import tarfile
for b in ("B", "V"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
mkdir -p logs
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== B $(cat benchB/COMMIT), V $(cat benchV/COMMIT)"
for mb in llama-3.2-1b:B llama-3.2-1b:V qwen3-0.6b:B qwen3-0.6b:V llama-3.2-1b:B llama-3.2-1b:V qwen3-0.6b:B qwen3-0.6b:V; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -1
done
for mb in llama-3.2-1b:B llama-3.2-1b:V qwen3-0.6b:B qwen3-0.6b:V; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 4096 ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 4096 2>&1 | grep -E "$keep" | head -1
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- V $m 2 layers against the CPU ($((SECONDS - t0)) s)"
  timeout 60 benchV/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > logs/checkV-$m.txt 2>&1
  echo "exit $?"; grep -E "$keep" logs/checkV-$m.txt | head -4
done
for mb in llama-3.2-1b:V qwen3-0.6b:V; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 profile ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 --profile > logs/decode$b-$m-512.txt 2>&1
  grep -E "busy|^  (attention|o_proj.k0|mlp.k0) " logs/decode$b-$m-512.txt | head -5
done
echo "-- V mpk_gpu ($((SECONDS - t0)) s)"
timeout 300 benchV/mpk_gpu --ignored --test-threads=1 --nocapture > logs/mpk_gpuV.txt 2>&1
echo "exit $?"; grep -E "test result|panick|overhead_" logs/mpk_gpuV.txt | head -8
grep -cE "pos 41[0-9][0-9]: token .* matches" logs/mpk_gpuV.txt
tar cJf "$OUT/call3-logs.tar.xz" logs
echo "== done ($((SECONDS - t0)) s)"

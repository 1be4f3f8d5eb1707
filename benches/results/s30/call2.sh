#!/usr/bin/env bash
# Session 30, device call 2: change 73 (a projection that reads a built-in's output — o_proj
# after the decode attention, layer 0's q/k/v after the embedding — copies its weight tiles'
# prologue stages into shared memory before its dependency wait). B = main's decode (12cf3f1's
# code), E = main + change 73 (change 72 reverted). B E B E on the 1B and Qwen3 at 512, B E on
# the 8B; E's two-layer 1B and Qwen3 against the CPU; profiles; E's mpk_gpu.
# carry [".gpu-bundle"].
set -u
t0=$SECONDS
python3 - <<'PY'
import tarfile
for b in ("B", "E"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
mkdir -p logs
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== B $(cat benchB/COMMIT), E $(cat benchE/COMMIT)"
for mb in llama-3.2-1b:B llama-3.2-1b:E qwen3-0.6b:B qwen3-0.6b:E llama-3.2-1b:B llama-3.2-1b:E qwen3-0.6b:B qwen3-0.6b:E llama-3.1-8b:B llama-3.1-8b:E; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -1
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- E $m 2 layers against the CPU ($((SECONDS - t0)) s)"
  timeout 60 benchE/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > logs/checkE-$m.txt 2>&1
  echo "exit $?"; grep -E "$keep" logs/checkE-$m.txt | head -4
done
for mb in llama-3.2-1b:E llama-3.2-1b:B qwen3-0.6b:E qwen3-0.6b:B; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 profile ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 --profile > logs/decode$b-$m-512.txt 2>&1
  grep -E "busy|^  (attention|o_proj.k0|mlp.k0) " logs/decode$b-$m-512.txt | head -5
done
echo "-- E mpk_gpu ($((SECONDS - t0)) s)"
timeout 300 benchE/mpk_gpu --ignored --test-threads=1 --nocapture > logs/mpk_gpuE.txt 2>&1
echo "exit $?"; grep -E "test result|panick|overhead_" logs/mpk_gpuE.txt | head -8
grep -cE "pos 41[0-9][0-9]: token .* matches" logs/mpk_gpuE.txt
tar cJf "$OUT/call2-logs.tar.xz" logs
echo "== done ($((SECONDS - t0)) s)"

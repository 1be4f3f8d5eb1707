#!/usr/bin/env bash
# Session 30, device call 1: change 72 (the worker loop keeps the next task's descriptor — table
# rows and first waits — in shared memory, loaded by warp 1 while warp 0 polls). B = main's
# decode (12cf3f1's code), N = main + change 72. B N B N on the 1B and Qwen3 at 512, B N on the
# 8B; N's mpk_gpu (every test graph against the CPU, the overhead measurements), B's overhead
# test beside it; N's two-layer 1B and Qwen3 against the CPU; N's and B's 1B and Qwen3 profiles.
# carry [".gpu-bundle"].
set -u
t0=$SECONDS
python3 - <<'PY'
import tarfile
for b in ("B", "N"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
mkdir -p logs
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== B $(cat benchB/COMMIT), N $(cat benchN/COMMIT)"
for mb in llama-3.2-1b:B llama-3.2-1b:N qwen3-0.6b:B qwen3-0.6b:N llama-3.2-1b:B llama-3.2-1b:N qwen3-0.6b:B qwen3-0.6b:N llama-3.1-8b:B llama-3.1-8b:N; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -2
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- N $m 2 layers against the CPU ($((SECONDS - t0)) s)"
  timeout 60 benchN/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > logs/checkN-$m.txt 2>&1
  echo "exit $?"; grep -E "$keep" logs/checkN-$m.txt | head -4
done
for mb in llama-3.2-1b:N llama-3.2-1b:B qwen3-0.6b:N qwen3-0.6b:B; do
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 512 profile ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 --profile > logs/decode$b-$m-512.txt 2>&1
  grep -E "busy|^  (qkv.k0|attention|o_proj.k0|mlp.k0|mlp.k1|logits.k0) " logs/decode$b-$m-512.txt | head -8
done
echo "-- B overhead ($((SECONDS - t0)) s)"
timeout 120 benchB/mpk_gpu --ignored --test-threads=1 --nocapture overhead > logs/overheadB.txt 2>&1
grep -E "overhead_" logs/overheadB.txt
echo "-- N mpk_gpu ($((SECONDS - t0)) s)"
timeout 300 benchN/mpk_gpu --ignored --test-threads=1 --nocapture > logs/mpk_gpuN.txt 2>&1
echo "exit $?"; grep -E "test result|panick|overhead_" logs/mpk_gpuN.txt | head -8
grep -cE "pos 41[0-9][0-9]: token .* matches" logs/mpk_gpuN.txt
tar cJf "$OUT/call1-logs.tar.xz" logs
echo "== done ($((SECONDS - t0)) s)"

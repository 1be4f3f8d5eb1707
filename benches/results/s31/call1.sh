#!/usr/bin/env bash
# Session 31, device call 1: change 75 (the LM head as one round of 132 wide tasks) and change 74
# (the decode attention loads value vectors with its key rows). B = main's decode (12cf3f1's
# code), V = main + change 74, L = main + change 75, LV = both. B V L LV twice on the 1B and
# Qwen3 at 512; LV's two-layer 1B and Qwen3 against the CPU; LV's mpk_gpu; LV's profiles; B LV
# at 4096; the 8B B L LV at 512. Steps are skipped past 540 s. carry [".gpu-bundle"].
set -u
t0=$SECONDS
python3 - <<'PY'
import tarfile
for b in ("B", "V", "L", "LV"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
keep="ms/token|busy|error|panick|matches|mismatch|differ"
mkdir -p logs
late() { [ $((SECONDS - t0)) -gt 540 ] && echo "(skipped: $((SECONDS - t0)) s)"; }
nvidia-smi --query-gpu=name --format=csv,noheader
for b in B V L LV; do echo "== $b $(cat bench$b/COMMIT)"; done
for r in 1 2; do
  for m in llama-3.2-1b qwen3-0.6b; do
    for b in B V L LV; do
      echo "-- $b $m pos 512 run $r ($((SECONDS - t0)) s)"
      timeout 60 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -1
    done
  done
done
for m in llama-3.2-1b qwen3-0.6b; do
  echo "-- LV $m 2 layers against the CPU ($((SECONDS - t0)) s)"
  timeout 60 benchLV/decode --random $m --layers 2 --tokens 3 --pos 300 --check 3 > logs/checkLV-$m.txt 2>&1
  echo "exit $?"; grep -E "$keep" logs/checkLV-$m.txt | head -4
done
echo "-- LV mpk_gpu ($((SECONDS - t0)) s)"
timeout 240 benchLV/mpk_gpu --ignored --test-threads=1 --nocapture > logs/mpk_gpuLV.txt 2>&1
echo "exit $?"; grep -E "test result|panick|overhead_" logs/mpk_gpuLV.txt | head -8
for m in llama-3.2-1b qwen3-0.6b; do
  late && continue
  echo "-- LV $m pos 512 profile ($((SECONDS - t0)) s)"
  timeout 60 benchLV/decode --random $m --tokens 64 --pos 512 --profile > logs/decodeLV-$m-512.txt 2>&1
  grep -E "busy|^  (attention|logits.k0|argmax|next_token) " logs/decodeLV-$m-512.txt | head -6
done
for mb in llama-3.2-1b:B llama-3.2-1b:LV qwen3-0.6b:B qwen3-0.6b:LV; do
  late && continue
  m=${mb%%:*}; b=${mb##*:}
  echo "-- $b $m pos 4096 ($((SECONDS - t0)) s)"
  timeout 60 bench$b/decode --random $m --tokens 64 --pos 4096 2>&1 | grep -E "$keep" | head -1
done
for b in B L LV; do
  late && continue
  echo "-- $b llama-3.1-8b pos 512 ($((SECONDS - t0)) s)"
  timeout 90 bench$b/decode --random llama-3.1-8b --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -1
done
tar cJf "$OUT/call1-logs.tar.xz" logs
echo "== done ($((SECONDS - t0)) s)"

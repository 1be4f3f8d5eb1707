#!/usr/bin/env bash
# Not run (session 27: no machine could be started; call3.sh supersedes it). Session 27's
# second device call: session 25's (benches/results/s25/call1.sh: session 24's dims
# group, memcheck, S-sized and bucketed tests, split-K over B; then mirage-candle's GPU run), then
# the profile of T (change 66 at 64, now the default) on Qwen3-0.6B at position 512, to see why
# its gain (3.3%) fell short of the prediction (6-13%); then PyTorch's decode_baseline.py beside
# T on the 1B and Qwen3 as time allows.
# Bundles: .gpu-bundle/{dims,T}.tar.xz (recipes in s24/call1.sh and s26/call1.sh) and
# .gpu-candle (scripts/candle-pack.sh). carry [".gpu-bundle", ".gpu-candle"].
set -u
t0=$SECONDS
bash benches/results/s25/call1.sh
echo "== T qwen3-0.6b pos 512 profile ($((SECONDS - t0)) s)"
python3 -c "import tarfile; tarfile.open('.gpu-bundle/T.tar.xz').extractall('.')"
timeout 100 benchT/decode --random qwen3-0.6b --tokens 64 --pos 512 --profile > "$OUT/decodeT-qwen3-512.txt" 2>&1
grep -E "ms/token|busy|error|panick|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeT-qwen3-512.txt" | head -40
# PyTorch's best beside T in the same call, as time allows (each ~105-145 s: torch.compile).
for m in llama-3.2-1b qwen3-0.6b; do
  left=$((420 - SECONDS + t0))
  [ $left -gt 160 ] || { echo "torch $m: not run (time)"; continue; }
  echo "-- T $m pos 512 ($((SECONDS - t0)) s)"
  timeout 80 benchT/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "ms/token|error|panick" | head -3
  echo "-- torch $m ($((SECONDS - t0)) s)"
  timeout $((left - 20)) python3 benches/py/decode_baseline.py $m --pos 512 --json "$OUT/torch-decode-$m.json" 2>&1 | grep -vE "Warning|warn" | tail -6
done
echo "== done ($((SECONDS - t0)) s)"

#!/usr/bin/env bash
# Session 20, device call 4: the code that lands (changes 48-50, change 51 reverted) with the
# new default prefetch window 0: R (decode of 48-50, call 2) at --prefetch-ahead 0 with a sweep
# back to 1, at positions 512 and 4096, on the three models.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/Rbench.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call4.txt
R=benchR/decode
{
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  for pos in 512 4096; do
    sweep=""; [ $pos = 512 ] && sweep="--prefetch-sweep 1,0"
    echo "-- R $m pos $pos, ahead 0 $sweep ($((SECONDS-t0)) s)"
    timeout 100 $R --random $m --tokens 64 --pos $pos --prefetch-ahead 0 --profile $sweep > "$OUT/decodeR0-$m-$pos.txt" 2>&1
    grep -E "ms/token|busy|error|panick|prefetch ahead" "$OUT/decodeR0-$m-$pos.txt" | head -8
  done
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 8000 "$log"

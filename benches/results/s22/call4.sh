#!/usr/bin/env bash
# Session 22, device call 4: the 8B beside PyTorch's 8B step in the same call. Z = main's
# decode with change 58 (call 3's binary): the 8B at position 512, then decode_baseline.py's 8B.
set -u
python3 - <<'PY'
import tarfile
tarfile.open(".gpu-bundle/Z.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call4.txt
{
echo "-- Z llama-3.1-8b pos 512 ($((SECONDS-t0)) s)"
timeout 70 benchZ/decode --random llama-3.1-8b --tokens 64 --pos 512 2>&1 | grep -E "ms/token|error|panick" | head -3
left=$((225 - SECONDS + t0))
echo "-- torch llama-3.1-8b ($((SECONDS-t0)) s, $left s left)"
timeout $left python3 benches/py/decode_baseline.py llama-3.1-8b --pos 512 --json "$OUT/torch-decode4-llama-3.1-8b.json" 2>&1 | grep -vE "Warning|warn" | tail -6
echo "exit $?"
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 6000 "$log"

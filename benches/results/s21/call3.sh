#!/usr/bin/env bash
# Session 21, device call 3: the decode example's warm-up (W = main's decode with it; V = call
# 2's binary without), the table's runs of W at positions 512 and 4096, and PyTorch's 8B step
# in the same call (its torch.compile takes minutes: last, with the time left).
set -u
python3 - <<'PY'
import tarfile
for b in ("V", "W"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call3.txt
keep="ms/token|busy|error|panick|matches|mismatch|differ|prefetch ahead"
{
echo "-- V llama-3.1-8b pos 512, timed again after the first runs ($((SECONDS-t0)) s)"
timeout 100 benchV/decode --random llama-3.1-8b --tokens 64 --pos 512 --prefetch-sweep 0 2>&1 | grep -E "$keep" | head -6
for m in llama-3.1-8b llama-3.2-1b qwen3-0.6b; do
  for pos in 512 4096; do
    extra=""; [ $pos = 512 ] && extra="--profile --prefetch-sweep 0"
    echo "-- W $m pos $pos $extra ($((SECONDS-t0)) s)"
    timeout 100 benchW/decode --random $m --tokens 64 --pos $pos $extra > "$OUT/decodeW-$m-$pos.txt" 2>&1
    grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decodeW-$m-$pos.txt" | head -34
  done
done
left=$((585 - SECONDS + t0))
echo "-- torch llama-3.1-8b ($((SECONDS-t0)) s, $left s left)"
timeout $((left - 5)) python3 benches/py/decode_baseline.py llama-3.1-8b --pos 512 --json "$OUT/torch-decode3-8b.json" 2>&1 | grep -vE "Warning|warn" | tail -8
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tar -cJf "$OUT/call3-logs.tar.xz" -C "$OUT" $(cd "$OUT" && ls decodeW-*.txt) 2>/dev/null
rm -f "$OUT"/decodeW-*.txt
tail -c 12000 "$log"

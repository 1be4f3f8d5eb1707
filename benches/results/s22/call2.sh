#!/usr/bin/env bash
# Session 22, device call 2: does the L2 prefetch pay? X = main's decode (prefetch at most 192
# KiB per task), P0 = the same code built with MIRAGE_DECODE_PREFETCH_KIB=0 (no prefetch),
# P320 = built with 320 KiB. Profiles of each on the 1B and the 8B (and X, P0 on Qwen3), then
# the binaries alternated at position 512.
set -u
python3 - <<'PY'
import tarfile
for b in ("X", "P0", "P320"):
    tarfile.open(f".gpu-bundle/{b}.tar.xz").extractall(".")
PY
t0=$SECONDS
log=$OUT/call2.txt
keep="ms/token|busy|error|panick|matches|mismatch|differ"
{
for m in llama-3.2-1b qwen3-0.6b llama-3.1-8b; do
  bins="X P0 P320"; [ $m = qwen3-0.6b ] && bins="X P0"
  for b in $bins; do
    echo "-- $b $m pos 512 profile ($((SECONDS-t0)) s)"
    timeout 100 bench$b/decode --random $m --tokens 64 --pos 512 --profile > "$OUT/decode$b-$m.txt" 2>&1
    grep -E "$keep|^  [a-z_.0-9]+ +[0-9]+ +[0-9]+ |^layer|^  l[0-9]" "$OUT/decode$b-$m.txt" | head -34
  done
  for b in $bins; do
    left=$((585 - SECONDS + t0)); [ $left -gt 60 ] || { echo "$b $m: not run (time)"; continue; }
    echo "-- $b $m pos 512 ($((SECONDS-t0)) s)"
    timeout 80 bench$b/decode --random $m --tokens 64 --pos 512 2>&1 | grep -E "$keep" | head -3
  done
done
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tar -cJf "$OUT/call2-logs.tar.xz" -C "$OUT" $(cd "$OUT" && ls decode*.txt) 2>/dev/null
rm -f "$OUT"/decode*.txt
tail -c 12000 "$log"

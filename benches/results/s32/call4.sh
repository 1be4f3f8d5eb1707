#!/usr/bin/env bash
# Session 32, device call 4: where the corpus (issue 23) stands — bench binary C (main at d1fbe07)
# run twice on the whole corpus, PyTorch's corpus set (compile mode default) first in the same
# call. carry [".gpu-bundle"] (S2.tar.xz of call 3).
set -u
t0=$SECONDS
python3 -c "import tarfile; tarfile.open('.gpu-bundle/S2.tar.xz').extractall('.')"
D=$(date -u +%F)
log=$OUT/call4.txt
{
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== torch corpus ($(date -u +%T))"
timeout 200 python3 benches/py/torch_baselines.py --set corpus --compile-mode default --json "$OUT/torch4.json" 2>&1 | grep -vE "Warning|warn" | tail -3
CASES=$(python3 -c "import json; print(' '.join(json.load(open('$OUT/torch4.json'))['rows']))")
for r in 1 2; do
  echo "== ours C run $r ($((SECONDS-t0)) s)"
  timeout 150 benchS/gpuC --torch "$OUT/torch4.json" --out "/tmp/ours4-$r" --commit "d1fbe07" --date "$D" $CASES 2>&1 | grep -E "^\| [a-z]|MISMATCH|error|panick" | cut -c1-220
done
cp /tmp/ours4-2/gpu-bench.md "$OUT/corpus-C.md"
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 6000 "$log"

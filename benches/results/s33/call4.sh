#!/usr/bin/env bash
# Session 33, device call 4: programmatic dependent launch (change 81). First the standalone
# experiment (pdl.cu: a streaming kernel then a small one, plain vs PDL); then the bundle
# .tune/pdl (attention and down-projection programs, 2–3 candidates each, built with the
# second kernels' griddepcontrol.wait) measured with PDL off (A: MIRAGE_DEPENDENT_LAUNCH=0) and
# on (B), alternated A B A B. Carry .tune/tune, .tune/lib, .tune/pdl.
set -u
out=${OUT:-/tmp/s33}
mkdir -p "$out/pdl"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/pdl/gpu.txt"
nvcc -O3 -arch=sm_90a -o /tmp/pdl benches/results/s33/pdl.cu && /tmp/pdl | tee "$out/pdl/pdl.txt"
export LD_LIBRARY_PATH="$PWD/.tune/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for r in 1 2; do
  MIRAGE_DEPENDENT_LAUNCH=0 .tune/tune measure .tune/pdl --out "$out/pdl/a$r.json" > "$out/pdl/a$r.txt" 2> "$out/pdl/a$r.log"
  echo "A$r: exit $?"
  .tune/tune measure .tune/pdl --out "$out/pdl/b$r.json" > "$out/pdl/b$r.txt" 2> "$out/pdl/b$r.log"
  echo "B$r: exit $?"
done
grep -iE "brought|not measured|error|mismatch" "$out"/pdl/*.log | head
python3 - "$out/pdl" <<'PY'
import json, sys, statistics
d = sys.argv[1]
runs = {k: json.load(open(f"{d}/{k}.json")) for k in ["a1", "b1", "a2", "b2"]}
print(f"{'program':40s} cand   A1      B1      A2      B2    B/A")
for pi, p in enumerate(runs["a1"]["programs"]):
    for ci, c in enumerate(p["candidates"]):
        v = [runs[k]["programs"][pi]["candidates"][ci].get("measured_us") for k in ["a1", "b1", "a2", "b2"]]
        if None in v:
            print(p["name"], ci, v); continue
        ratio = (v[1] + v[3]) / (v[0] + v[2])
        print(f"{p['name']:40s} {ci:3d} {c['kernels']}k " + " ".join(f"{x:7.2f}" for x in v) + f"  {ratio:.3f}")
PY
tar -cf "$out/pdl.tar" -C "$out" pdl && rm -rf "$out/pdl"

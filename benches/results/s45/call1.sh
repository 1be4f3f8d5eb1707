#!/usr/bin/env bash
# Session 45, call 1. (a) merge.cu's chain variants (session 44's call 3 as prepared; DECISIONS
# change 100), built with `nvcc -O3 -std=c++17 -arch=sm_90a -o .s45/merge benches/sync/merge.cu`.
# (b) Experiment U: main's decode example (M, 7a9a103) against U, the same with Qwen3's and the
# 1B's megakernels hand-edited by `benches/results/s45/ux.py` (the decode attention returns after
# its partial: no fence, ticket or merge; output wrong, time an upper bound of the merge's cost),
# cubins by `nvcc -cubin -O3 -std=c++17 -arch=sm_90a`, swapped into the build's out/mpk/ and the
# example relinked. Alternated twice, position 512, 64 tokens one launch each.
set -u
out=${OUT:-/tmp/s45}
mkdir -p "$out/a"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/a/gpu.txt"
for r in 1 2; do for kv in "" --kv; do timeout 60 .s45/merge 2000 7 $kv > "$out/a/merge$kv.$r.txt" 2>&1; echo "merge$kv $r: exit $? ($((SECONDS - t0)) s)"; tail -12 "$out/a/merge$kv.$r.txt"; done; done
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in M U; do
  timeout 120 .s45/decode$v --random $m --tokens 64 --pos 512 > "$out/a/decode$v-$m.$r.txt" 2>&1
  echo "decode $v $m $r: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/a/decode$v-$m.$r.txt" | cut -c1-70 | tr '\n' ' ') ($((SECONDS - t0)) s)"
done; done; done
(cd "$out" && tar -cJf a.tar.xz a && rm -rf a)

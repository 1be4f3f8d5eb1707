#!/usr/bin/env bash
# The benchmark run on the GPU machine (after scripts/gpu-pack.sh here), from the repository root:
# the PyTorch anchors (torch_baselines.py) and the hand-written Triton kernels (triton_fused.py)
# first, then our GPU bench binary with the PyTorch JSON, which checks every case against the
# CPU reference, times it and prints one table. Results go to $OUT (the device tool's output
# folder) or benches/results/latest: torch.json, gpu-bench.md/.json (few files: the device tool
# returns only a handful); everything else is printed.
#
#   bash scripts/gpu-bench.sh [CASE ...]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-benches/results/latest}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
status=0
python3 .gpu/torch_baselines.py "$@" --json "$out/torch.json" 2>&1 || status=1
if [ -z "${MIRAGE_SKIP_TRITON:-}" ]; then
  python3 .gpu/triton_fused.py 2>&1 || status=1
fi
bench=$(ls .gpu/bin/bench/gpu-* .gpu/bin/test/gpu-* 2>/dev/null | head -1)
if [ -z "$bench" ]; then
  echo "no .gpu/bin/bench/gpu-* binary: run scripts/gpu-pack.sh first" >&2
  exit 1
fi
torch_arg=()
[ -s "$out/torch.json" ] && torch_arg=(--torch "$out/torch.json")
"$bench" "${torch_arg[@]}" --out "$out" --commit "$(cat .gpu/COMMIT 2>/dev/null || echo unknown)" --date "$(date -u +%F)" "$@" || status=1
# Our Triton backend's modules of the benchmark programs (scripts/triton-pack.sh), checked against
# the CPU reference and timed beside our CUDA kernels and PyTorch of this run.
if [ -d .gpu/triton ]; then
  python3 .gpu/triton/triton_check.py .gpu/triton --groups bench --bench-json "$out/gpu-bench.json" \
    --torch-json "$out/torch.json" --json "$out/triton-bench.json" 2>&1 || status=1
fi
exit $status

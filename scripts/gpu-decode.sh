#!/usr/bin/env bash
# Whole-model decoding on the GPU machine, from a pack built with MIRAGE_DECODE=1
# (`MIRAGE_DECODE=1 bash scripts/gpu-pack.sh`; the binaries unpacked under .gpu/bin):
#  1. ours: examples/decode.rs with random weights, 64 tokens from positions 512 and 4096;
#  3. PyTorch's best of the same run: .gpu/decode_baseline.py (eager, CUDA graph, torch.compile)
#     at the same positions (its static cache sized past 4096 for the second);
#  2. one random checkpoint per compared model (written by the `model` test binary, which also
#     decodes it with the CPU reference `mirage::model::reference`) through PyTorch and through
#     our megakernel: greedy tokens for 32 steps (and PyTorch's logits) against the reference.
#
#   bash scripts/gpu-decode.sh [MODEL ...]    OUT=dir (default benches/results/decode)
#   MIRAGE_DECODE_COMPARE="llama-3.2-1b"      the models of step 2 (default: llama-3.2-1b qwen3-0.6b)
#   MIRAGE_TORCH_LIMIT_S bounds each PyTorch run (420 s; the three models with torch.compile took 307 s); MIRAGE_TORCH_4096=0 skips position 4096
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-benches/results/decode}
mkdir -p "$out"
models=${*:-llama-3.2-1b qwen3-0.6b llama-3.1-8b}
e=.gpu/bin/example/decode
[ -x "$e" ] || { echo "no $e: scripts/gpu-pack.sh packs it (MIRAGE_DECODE=1 builds the models)"; exit 1; }
if [ -f .gpu/lib.tar.xz ]; then
  mkdir -p .gpu/lib && tar -xJf .gpu/lib.tar.xz -C .gpu/lib
  export LD_LIBRARY_PATH="$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
failed=()
for m in $models; do
  for pos in 512 4096; do
    f="$out/ours-$m-$pos.txt"
    timeout 240 "$e" --random "$m" --tokens 64 --pos "$pos" > "$f" 2>&1 || failed+=("ours $m pos $pos (exit $?)")
    echo "== ours $m pos $pos"; grep -E "ms/token|waiting" "$f" | cut -c1-220
  done
done
t=$(ls .gpu/bin/test/model* 2>/dev/null | head -1)
for m in ${MIRAGE_DECODE_COMPARE-llama-3.2-1b qwen3-0.6b}; do
  [ -n "$t" ] || { failed+=("no model test binary"); break; }
  d=$(mktemp -d)
  echo "== $m: one checkpoint through the CPU reference, PyTorch and ours"
  MIRAGE_CHECKPOINT="$d" MIRAGE_MODEL="$m" "$t" --ignored --exact reference_tokens_of_a_checkpoint --nocapture \
    > "$out/reference-$m.txt" 2>&1 || failed+=("reference $m")
  python3 .gpu/decode_baseline.py --weights "$d" --check 32 --compare "$d/reference.json" \
    > "$out/torch-check-$m.txt" 2>&1 || failed+=("PyTorch check $m")
  tail -3 "$out/torch-check-$m.txt"
  timeout 240 "$e" --model "$d" --tokens 32 --pos 0 --token 1 > "$out/ours-check-$m.txt" 2>&1 || failed+=("ours check $m")
  python3 - "$d/reference.json" "$out/ours-check-$m.txt" <<'PY' || failed+=("tokens $m")
import json, re, sys
ref = json.load(open(sys.argv[1]))["tokens"]
line = [l for l in open(sys.argv[2]) if l.startswith("tokens: ")]
ours = [int(x) for x in re.findall(r"\d+", line[0])] if line else []
agree = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
print(f"ours vs the CPU reference: the first {agree} of {len(ref)} tokens agree")
sys.exit(0 if ours and agree == len(ref) else 1)
PY
  cp "$d/reference.json" "$out/reference-$m.json" 2>/dev/null
  rm -rf "$d"
done
echo "== PyTorch (decode_baseline.py)"
timeout ${MIRAGE_TORCH_LIMIT_S:-420} python3 .gpu/decode_baseline.py $models --pos 512 --json "$out/torch-512.json" > "$out/torch-512.txt" 2>&1 \
  || failed+=("PyTorch pos 512")
[ "${MIRAGE_TORCH_4096:-1}" = 0 ] || DECODE_MAX_SEQ=4160 timeout ${MIRAGE_TORCH_LIMIT_S:-420} python3 .gpu/decode_baseline.py $models --pos 4096 --json "$out/torch-4096.json" \
  > "$out/torch-4096.txt" 2>&1 || failed+=("PyTorch pos 4096")
tail -n 4 "$out/torch-512.txt" "$out/torch-4096.txt" 2>/dev/null
if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "all decode runs passed"

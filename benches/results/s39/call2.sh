#!/usr/bin/env bash
# Session 39, device call 2: (1) a random Qwen3-0.6B checkpoint in Hugging Face layout (written
# by the `model` test binary, which also decodes it with the CPU reference, 32 greedy steps)
# through PyTorch (decode_baseline.py --weights --check 32 --compare) and through the
# megakernel of change 91 (decode --model, q/k/v joined at upload by fuse_qkv): tokens and
# logits against the reference; (2) PyTorch's decode step for the 1B and Qwen3 (same-call
# anchors for issue 18); (3) compute-sanitizer memcheck over C's two-layer Qwen3 and 1B;
# (4) the same checkpoint check for Llama-3.2-1B, as the time allows. Carry .gpu-s39/c.tar.xz
# (.s39/decodeC, decodeD, mpk_gpu, model). One archive at the end.
set -u
out=${OUT:-/tmp/s39}
mkdir -p "$out/c2"
t0=$SECONDS
budget=${BUDGET:-580}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf .gpu-s39/c.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/c2/gpu.txt"
check() {  # check MODEL: the checkpoint through the CPU reference, PyTorch and ours
  local m=$1 d
  d=$(mktemp -d)
  MIRAGE_CHECKPOINT="$d" MIRAGE_MODEL="$m" timeout 200 .s39/model --ignored --exact reference_tokens_of_a_checkpoint --nocapture \
    > "$out/c2/reference-$m.txt" 2>&1
  echo "reference $m: exit $? ($((SECONDS - t0)) s)"; grep -E "wrote|steps in|panicked" "$out/c2/reference-$m.txt" | cut -c1-160
  timeout 120 python3 benches/py/decode_baseline.py --weights "$d" --check 32 --compare "$d/reference.json" \
    > "$out/c2/torch-check-$m.txt" 2>&1
  echo "torch check $m: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/c2/torch-check-$m.txt" | tail -3 | cut -c1-200
  timeout 120 .s39/decodeC --model "$d" --tokens 32 --pos 0 --token 1 > "$out/c2/ours-check-$m.txt" 2>&1
  echo "ours check $m: exit $? ($((SECONDS - t0)) s)"
  python3 - "$d/reference.json" "$out/c2/ours-check-$m.txt" <<'PY'
import json, re, sys
ref = json.load(open(sys.argv[1]))["tokens"]
line = [l for l in open(sys.argv[2]) if l.startswith("tokens: ")]
ours = [int(x) for x in re.findall(r"\d+", line[0])] if line else []
agree = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
print(f"ours vs the CPU reference: the first {agree} of {len(ref)} tokens agree (ours {ours[:8]}..., reference {ref[:8]}...)")
PY
  cp "$d/reference.json" "$out/c2/reference-$m.json" 2>/dev/null
  rm -rf "$d"
}
check qwen3-0.6b
for m in llama-3.2-1b qwen3-0.6b; do
  l=$(left); [ "$l" -gt 150 ] || { echo "torch $m: not run ($l s left)"; continue; }
  timeout 150 python3 benches/py/decode_baseline.py $m --pos 512 --json "$out/c2/torch-decode-$m.json" > "$out/c2/torch-decode-$m.txt" 2>&1
  echo "torch $m: exit $? ($((SECONDS - t0)) s)"
  grep -vE "Warning|warn" "$out/c2/torch-decode-$m.txt" | tail -4 | cut -c1-160
done
for m in qwen3-0.6b llama-3.2-1b; do
  [ "$(left)" -gt 80 ] || { echo "memcheck $m: not run ($(left) s left)"; continue; }
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 1 .s39/decodeC --random $m \
    --layers 2 --tokens 2 --pos 300 > "$out/c2/memcheck-$m.txt" 2>&1
  echo "memcheck $m: exit $? $(grep -E 'ERROR SUMMARY' "$out/c2/memcheck-$m.txt" | head -1) ($((SECONDS - t0)) s)"
done
if [ "$(left)" -gt 150 ]; then check llama-3.2-1b; else echo "1B checkpoint check: not run ($(left) s left)"; fi
cd "$out" && tar -cJf c2.tar.xz c2 && rm -rf c2

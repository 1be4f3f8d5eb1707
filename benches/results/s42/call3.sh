#!/usr/bin/env bash
# Session 42, call 3 (the command as run): R's 8B around PyTorch's 8B step; racecheck of R's
# two-layer Qwen3 with the time left.
TAG=.s42 ARCHIVE=.gpu-s42/a.tar.xz BUDGET=560
. scripts/device-call.sh
decode_run R llama-3.1-8b 512 2
timeout 330 python3 benches/py/decode_baseline.py llama-3.1-8b --pos 512 --json "$out/a/torch-decode-llama-3.1-8b.json" > "$out/a/torch-decode-llama-3.1-8b.txt" 2>&1
echo "torch 8b: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-llama-3.1-8b.txt" | tail -4 | cut -c1-160
decode_run R llama-3.1-8b 512 3
[ "$(left)" -gt 100 ] && { MIRAGE_MPK_WATCHDOG_MS=600000 timeout $(( $(left) - 20 )) compute-sanitizer --tool racecheck --error-exitcode 1 .s42/decodeR --random qwen3-0.6b --layers 2 --tokens 2 --pos 300 > "$out/a/racecheck-R.txt" 2>&1
  echo "racecheck R: exit $? $(grep -E 'SUMMARY' "$out/a/racecheck-R.txt" | head -2 | tr '\n' ' ') ($((SECONDS - t0)) s)"; }
pack

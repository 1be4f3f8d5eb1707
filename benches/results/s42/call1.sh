#!/usr/bin/env bash
# Session 42, call 1 (session 41's next-call.sh, on scripts/device-call.sh). Binaries built here
# on a fresh machine: T = main 8fcc41e, R = T + change 95 (branch s42-round: the decode
# attention's first round of loads into registers before any store), R's mpk_gpu. Change 95
# against main, Qwen3 and the 1B alternated twice at 512 with --profile; R's whole mpk_gpu and
# memcheck/racecheck of its two-layer Qwen3; PyTorch's 1B and Qwen3 steps beside; the 8B and the
# 1B at 4096 with R; PyTorch's 8B step if the budget allows.
TAG=.s42 ARCHIVE=.gpu-s42/a.tar.xz
. scripts/device-call.sh
for r in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for v in T R; do decode_run $v $m 512 $r --profile; done; done; done
timeout 150 .s42/mpk_gpuR --include-ignored --test-threads=1 --nocapture > "$out/a/mpk_gpu-R.txt" 2>&1
echo "mpk_gpu R: exit $? $(grep -E '^test result' "$out/a/mpk_gpu-R.txt" | tail -1) ($((SECONDS - t0)) s)"
grep -E 'panicked|FAILED' "$out/a/mpk_gpu-R.txt" | head -3 | cut -c1-200
for tool in memcheck racecheck; do
  [ "$(left)" -gt 80 ] || break
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 .s42/decodeR --random qwen3-0.6b --layers 2 --tokens 2 --pos 300 > "$out/a/$tool-R.txt" 2>&1
  echo "$tool R: exit $? $(grep -E 'SUMMARY' "$out/a/$tool-R.txt" | head -1) ($((SECONDS - t0)) s)"
done
for m in llama-3.2-1b qwen3-0.6b; do
  [ "$(left)" -gt 110 ] || break
  timeout 100 python3 benches/py/decode_baseline.py $m --pos 512 --json "$out/a/torch-decode-$m.json" > "$out/a/torch-decode-$m.txt" 2>&1
  echo "torch $m: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-$m.txt" | tail -3 | cut -c1-160
done
[ "$(left)" -gt 60 ] && decode_run R llama-3.1-8b 512 1
[ "$(left)" -gt 40 ] && decode_run R llama-3.2-1b 4096 1
if [ "$(left)" -gt 130 ]; then
  timeout 120 python3 benches/py/decode_baseline.py llama-3.1-8b --pos 512 --json "$out/a/torch-decode-llama-3.1-8b.json" > "$out/a/torch-decode-llama-3.1-8b.txt" 2>&1
  echo "torch llama-3.1-8b: exit $? ($((SECONDS - t0)) s)"; grep -vE "Warning|warn" "$out/a/torch-decode-llama-3.1-8b.txt" | tail -3 | cut -c1-160
fi
pack

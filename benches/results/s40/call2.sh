#!/usr/bin/env bash
# Session 40, device call 2 (same H100 as call 1, run as one command line; the archive carried
# again): the full-model step check for main (M) and change 92 alone (T) — call 1 had it fail
# for T2 — and E's two-layer real-width test with a longer timeout (call 1's 80 s cut it).
tar -xJf .gpu-s40/c1.tar.xz; mkdir -p $OUT/c2
for v in M T; do for m in llama-3.2-1b qwen3-0.6b; do
  timeout 90 .s40/decode$v --random $m --tokens 2 --pos 512 --check 2 > $OUT/c2/check$v-$m.txt 2>&1
  echo "check $v $m: exit $? $(grep -c 'matches the CPU' $OUT/c2/check$v-$m.txt) match; $(grep -E 'Error' $OUT/c2/check$v-$m.txt | cut -c1-200)"
done; done
timeout 170 .s40/mpk_gpu --include-ignored --test-threads=1 --nocapture two_layers > $OUT/c2/mpk_gpu-E.txt 2>&1
echo "E two_layers exit $? $(grep -E '^test result' $OUT/c2/mpk_gpu-E.txt)"

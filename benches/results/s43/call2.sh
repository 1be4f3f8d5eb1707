#!/usr/bin/env bash
# Session 43, call 2: the level microbenchmark with two more variants (flagged-backoff, hybrid:
# tagged words behind a counter raised without a release fence), N = 1024, 2048, 3072, alone and
# with a projection per level.
TAG=.s43 ARCHIVE=.gpu-s43/b.tar.xz
. scripts/device-call.sh
for n in 1024 2048 3072; do for g in "" --gemv; do timeout 60 .s43/level $n 2000 7 $g | tee "$out/a/level2-$n$g.txt"; done; done
pack

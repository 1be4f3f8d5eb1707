#!/usr/bin/env bash
# Session 18, device call 1: where the generality set stands on main's code (binaries of 79dc3de,
# session 17's D: code identical to c857880), with same-run PyTorch (eager, graph, compile in its
# default mode) for every generality case; then Nsight Compute (full set, clocks left alone) on the
# largest relative losses: Qwen2.5-7B gate/up r1 and down r1/r16.
set -u
python3 -c "import tarfile; tarfile.open('.gpu-bundle/D.tar.xz').extractall('.')"
C=$(cat .gpu/COMMIT); D=$(date -u +%F)
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bench=$(ls .gpu/bin/test/gpu-* | head -1)
t0=$SECONDS
log=$OUT/call1.txt
CASES=$(grep -o "pub fn [a-z0-9_]*" benches/kernels/generality.rs | awk '{print $3}' | tr '\n' ' ')
prof() { # case, kernel regex, count
  timeout 120 ncu --clock-control none --set full -k "regex:^$2" -c "$3" -f -o "/tmp/$1" "$bench" --iters 2 "$1" > "/tmp/$1.log" 2>&1
  echo "== $1: ncu exit $? ($((SECONDS-t0)) s)"; tail -2 "/tmp/$1.log"
  ncu -i "/tmp/$1.ncu-rep" --page details > "/tmp/ncu/$1.txt" 2>&1
  grep -E "^  [a-z_0-9]+_k[0-9]|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Ipc|One or More Eligible|L2 Hit Rate|Stall|stall" "/tmp/ncu/$1.txt" | head -40
}
{
echo "== torch generality ($C, $(date -u +%T))"
timeout 290 python3 .gpu/torch_baselines.py --set generality --compile-mode default --json "$OUT/torch1.json" 2>&1 | tail -4
echo "== ours ($((SECONDS-t0)) s)"
timeout 150 "$bench" --torch "$OUT/torch1.json" --out "$OUT/ours1" --commit "$C" --date "$D" $CASES 2>&1 | grep -E "^\| |MISMATCH|error" | cut -c1-220
mkdir -p /tmp/ncu
prof qwen7b_gateup_r1_bf16 qwen7b_gateup_r1 1
prof qwen7b_down_r16_bf16 qwen7b_down_r16 2
prof qwen7b_down_r1_bf16 qwen7b_down_r1 2
tar -cJf "$OUT/ncu1.tar.xz" -C /tmp ncu
echo "== done ($((SECONDS-t0)) s)"
} > "$log" 2>&1
tail -c 11500 "$log"

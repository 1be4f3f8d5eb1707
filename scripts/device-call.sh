# Sourced by a device-call script (benches/results/sNN/callK.sh): the common preamble of the
# calls that run decode binaries on the lent GPU. Before sourcing, set TAG (the directory of the
# binaries, e.g. .s42) and ARCHIVE (the packed binaries, e.g. .gpu-s42/a.tar.xz). It unpacks the
# archive, records the GPU in $out/a/gpu.txt and defines
#   left                  the seconds left of $BUDGET (default 540) since sourcing;
#   decode_run V M P R [ARGS]  runs $TAG/decodeV --random M --tokens 64 --pos P ARGS into
#                         $out/a/decodeV-M-P.R.txt and prints its ms/token lines;
#   torch_run M P SECS    runs PyTorch's decode_baseline.py for model M at position P (its default
#                         cache of 2048 positions; 4160 when P > 1984) within SECS seconds into
#                         $out/a/torch-decode-M-P.{txt,json} and prints its last lines
#                         (torch.compile's first run takes 100-175 s);
#   sanitize_run TOOL V SECS  runs compute-sanitizer's TOOL (memcheck, racecheck, synccheck) on
#                         $TAG/decodeV, a two-layer Qwen3 for two tokens at position 300, into
#                         $out/a/TOOL-V.txt and prints its verdict;
#   pack                  archives $out/a as $out/a.tar.xz (what the call brings back).
set -u
out=${OUT:-/tmp/${TAG#.}}
mkdir -p "$out/a"
t0=$SECONDS
budget=${BUDGET:-540}
left() { echo $((budget - SECONDS + t0)); }
tar -xJf "$ARCHIVE"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/a/gpu.txt"
decode_run() {
  local v=$1 m=$2 p=$3 r=$4
  shift 4
  timeout 120 "$TAG/decode$v" --random "$m" --tokens 64 --pos "$p" "$@" > "$out/a/decode$v-$m-$p.$r.txt" 2>&1
  echo "decode $v $m @$p: exit $? $(grep -E '^one launch per token|^64 tokens in one' "$out/a/decode$v-$m-$p.$r.txt" | cut -c1-60 | tr '\n' ' ') ($((SECONDS - t0)) s)"
}
torch_run() {
  local m=$1 p=$2 secs=$3
  local seq=2048
  [ "$p" -gt 1984 ] && seq=4160
  DECODE_MAX_SEQ=$seq timeout "$secs" python3 benches/py/decode_baseline.py "$m" --pos "$p" \
    --json "$out/a/torch-decode-$m-$p.json" > "$out/a/torch-decode-$m-$p.txt" 2>&1
  echo "torch $m @$p: exit $? ($((SECONDS - t0)) s)"
  tail -4 "$out/a/torch-decode-$m-$p.txt"
}
sanitize_run() {
  local tool=$1 v=$2 secs=$3
  MIRAGE_MPK_WATCHDOG_MS=600000 timeout "$secs" compute-sanitizer --tool "$tool" --error-exitcode 1 \
    "$TAG/decode$v" --random qwen3-0.6b --layers 2 --tokens 2 --pos 300 > "$out/a/$tool-$v.txt" 2>&1
  echo "$tool $v: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/a/$tool-$v.txt" | tail -1) ($((SECONDS - t0)) s)"
}
pack() { (cd "$out" && tar -cJf a.tar.xz a && rm -rf a); }

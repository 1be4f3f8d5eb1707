# Sourced by a device-call script (benches/results/sNN/callK.sh): the common preamble of the
# calls that run decode binaries on the lent GPU. Before sourcing, set TAG (the directory of the
# binaries, e.g. .s42) and ARCHIVE (the packed binaries, e.g. .gpu-s42/a.tar.xz). It unpacks the
# archive, records the GPU in $out/a/gpu.txt and defines
#   left                  the seconds left of $BUDGET (default 540) since sourcing;
#   decode_run V M P R [ARGS]  runs $TAG/decodeV --random M --tokens 64 --pos P ARGS into
#                         $out/a/decodeV-M-P.R.txt and prints its ms/token lines;
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
pack() { (cd "$out" && tar -cJf a.tar.xz a && rm -rf a); }

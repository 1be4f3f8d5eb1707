#!/usr/bin/env bash
# Runs compute-sanitizer's memcheck, racecheck and synccheck over programs of a tuning bundle on
# the GPU machine: every candidate of each program is checked against the CPU reference and
# launched twice (a copy of the bundle with warmup 0, iterations 2, rounds 1; the bundle itself is
# left as it is). One line per program and tool with the tool's summary; the full reports go to
# OUT_DIR/san-TOOL-PROGRAM.txt.
#
#   scripts/sanitize-bundle.sh BUNDLE OUT_DIR PROGRAM...     (TUNE=path/to/tune, default .tune/tune)
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 BUNDLE OUT_DIR PROGRAM..." >&2
  exit 2
fi
bundle=$1 out=$2
shift 2
tune=${TUNE:-.tune/tune}
command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer is not on PATH" >&2; exit 2; }
[ -f "$bundle/manifest.json" ] || { echo "$bundle is not a tuning bundle (no manifest.json)" >&2; exit 2; }
mkdir -p "$out"
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "$bundle/." "$copy/"
python3 - "$copy/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
m.update(warmup=0, iters=2, rounds=1)
json.dump(m, open(p, "w"))
PY
status=0
for prog in "$@"; do
  for tool in memcheck racecheck synccheck; do
    report="$out/san-$tool-$prog.txt"
    timeout 120 compute-sanitizer --tool "$tool" --print-limit 20 "$tune" measure-program "$copy" "$prog" > "$report" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "$tool $prog: exit $rc: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$report" | tail -1)"
  done
done
exit $status

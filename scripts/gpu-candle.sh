#!/usr/bin/env bash
# On the GPU machine: runs what scripts/candle-pack.sh packed (.gpu-candle): mirage-candle's GPU
# tests and the candle_mlp example. The binaries link the CUDA libraries (cuBLAS, cuRAND,
# NVRTC, the runtime) dynamically: they are found under the Python packages' nvidia/cu13/lib
# (the image's PyTorch brings them) or the system's CUDA toolkit.
set -euo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
dir=.gpu-candle
mkdir -p "$dir/run" && tar -xJf "$dir/candle.tar.xz" -C "$dir/run"
echo "commit: $(cat "$dir/COMMIT")"
libs=$(python3 - <<'PY'
import os
try:
    import nvidia
    for d in nvidia.__path__:
        lib = os.path.join(d, "cu13", "lib")
        if os.path.isfile(os.path.join(lib, "libcublas.so.13")):
            print(lib)
            break
except ImportError:
    pass
PY
)
for d in $libs /usr/local/cuda/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
status=0
"$dir/run/bin/candle_tests" --include-ignored --test-threads 1 || status=1
"$dir/run/bin/candle_mlp" --iters 200 || status=1
if command -v compute-sanitizer >/dev/null && [ "${MIRAGE_CANDLE_SANITIZER:-1}" = 1 ]; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$dir/run/bin/candle_tests" --include-ignored --test-threads 1 || status=1
fi
exit $status

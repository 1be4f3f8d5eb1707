#!/usr/bin/env bash
# Install nvcc 13.0 (the version that matches the test GPU's driver, CUDA 13.0) from NVIDIA's
# Python wheels, for building mirage's kernels on a machine without a CUDA toolkit.
#
#   bash scripts/install-nvcc.sh
#
# Idempotent: pip leaves already-satisfied requirements alone. The nvcc binary lands under
# <site-packages>/nvidia/cu13/bin/nvcc, where mirage::nvcc finds it without further setup (or set
# NVCC to the printed path). nvcc needs a host C++ compiler (gcc/g++) on PATH, even for -cubin.
# Extra arguments go to pip (e.g. --user, or --target DIR).
set -euo pipefail

PYTHON=${PYTHON:-python3}
packages=(
  "nvidia-cuda-nvcc==13.0.*"
  "nvidia-cuda-crt==13.0.*"
  "nvidia-cuda-runtime==13.0.*"
  "nvidia-nvvm==13.0.*"
  "nvidia-cuda-cccl==13.0.*"
)

"$PYTHON" -m pip install --quiet --disable-pip-version-check "$@" "${packages[@]}"

nvcc=$("$PYTHON" - <<'PY'
import os, site, sys
dirs = []
try:
    import nvidia
    dirs += [os.path.dirname(p) for p in getattr(nvidia, "__path__", [])]
except ImportError:
    pass
try:
    dirs += site.getsitepackages()
except AttributeError:
    pass
dirs.append(site.getusersitepackages())
for d in dirs:
    for cand in (os.path.join(d, "cu13", "bin", "nvcc"), os.path.join(d, "nvidia", "cu13", "bin", "nvcc")):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            print(cand)
            sys.exit(0)
sys.exit("nvcc not found under the Python packages after installation")
PY
)

if ! command -v g++ >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  echo "warning: no host compiler (g++/gcc) on PATH; nvcc needs one (e.g. apt-get install g++)" >&2
fi

echo "nvcc: $nvcc"
"$nvcc" --version

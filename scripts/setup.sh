#!/usr/bin/env bash
# Installs everything mirage needs to build and test on a fresh Debian machine (no GPU needed):
#   - libz3-dev (the system Z3 4.8.12 the abstract-expression pruning links against),
#   - a host C/C++ compiler for nvcc and for -sys crates,
#   - Graphviz (`dot`: `mirage show --svg` and the picture test) and python3 (the Triton backend's
#     generated modules are byte-compiled in a test),
#   - nvcc 13.0 from NVIDIA's Python wheels (scripts/install-nvcc.sh).
# Idempotent; run as root (or with sudo available).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

need=()
dpkg -s libz3-dev >/dev/null 2>&1 || need+=(libz3-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v dot >/dev/null 2>&1 || need+=(graphviz)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "setup: apt-get install ${need[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi

bash "$here/install-nvcc.sh"
echo "setup: done"

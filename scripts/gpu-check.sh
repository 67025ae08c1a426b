#!/usr/bin/env bash
# Validation on a machine with a real NVIDIA GPU and driver. Builds (release), then runs
# the tests labelled gpu and the demo on the real driver, printing the figures worth
# recording. Bounded: well under 10 minutes. Usage: scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."

echo "== machine"
nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version --format=csv,noheader 2>&1 ||
  echo "nvidia-smi not available"

echo "== build"
scripts/setup.sh >/dev/null || exit 1
cmake --preset release -DHAMI_WERROR=OFF >/dev/null || exit 1
cmake --build --preset release -j "$(nproc)" >/dev/null || { echo "build failed"; exit 1; }

status=0
echo "== tests labelled gpu"
ctest --preset gpu --timeout 300 || status=1

echo "== demo on the real driver"
timeout 120 build/bin/hami run -- build/bin/hami-demo || status=1

exit $status

#!/usr/bin/env bash
# `make demo`: GPU sharing on this machine's GPU, or on the simulated one when it has none.
#   1. a CUDA program lists the devices and checks a memory round trip (hami-demo);
#   2. under `hami run --memory 1g` a process sees 1 GiB (cuMemGetInfo and NVML) and an
#      allocation past it fails with CUDA_ERROR_OUT_OF_MEMORY;
#   3. two processes of one `hami run` share one budget;
#   4. a process started with an empty environment (as after `su -` or an SSH login) stays
#      limited through the limits file that --limits-file-mount puts at /overrideEnv
#      (skipped, saying why, where a private mount namespace cannot be made);
#   5. under `hami run --sm 30` a process launching kernels back to back gets about 30% of
#      the GPU's time (NVML's per-process utilization);
#   6. a CUDA runtime program built with nvcc (tests/cudart) under `hami run --memory 1g`:
#      cudaMemGetInfo shows 1 GiB, a 2 GiB cudaMalloc fails with cudaErrorMemoryAllocation
#      and the program goes on (skipped, saying why, when nvcc was absent at configure time).
# Exit status 0 when every step that ran passed. Usage: scripts/demo.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build=${1:-build}
hami=$build/bin/hami
memdemo=$build/bin/hami-memory-demo
for f in "$hami" "$build/bin/hami-demo" "$memdemo"; do
  [[ -x $f ]] || { echo "demo: $f is missing; build first (make build)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/hami-demo-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
# A simulated machine of the demo's own (a real driver ignores this).
export HAMI_SIM_STATE=$work/sim.state

passed=0 failed=0 skipped=0
indent() { sed 's/^/    /'; }
# step TITLE COMMAND...: runs the command, shows its output indented, counts the outcome.
step() {
  local title=$1
  shift
  echo
  echo "== $title"
  if "$@" 2>&1 | indent; then
    passed=$((passed + 1))
  else
    echo "    -> FAILED"
    failed=$((failed + 1))
  fi
}

if "$hami" run -- true 2>&1 | grep -q "simulated GPU"; then
  gpu="the simulated GPU (no NVIDIA driver here; $("$hami" run -- true 2>&1 |
    sed -n 's/.*simulated GPU (\([^,]*\),.*/\1/p'))"
else
  gpu="the real GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null |
    head -1 || echo NVIDIA))"
fi
echo "hami demo on $gpu"

step "1. A CUDA program: hami run -- hami-demo" \
  "$hami" run -q -- "$build/bin/hami-demo"

step "2. One process, 1 GiB: hami run --memory 1g -- hami-memory-demo limit 1g" \
  "$hami" run -q --memory 1g -- "$memdemo" limit 1g

step "3. Two processes, one 2 GiB budget: hami run --memory 2g -- hami-memory-demo share 2g 512m" \
  "$hami" run -q --memory 2g -- "$memdemo" share 2g 512m

# A login-like process: nothing of the environment but the loader's variables and the
# simulated machine's (HAMI_SIM_*); no CUDA_DEVICE_MEMORY_LIMIT, no region path. Expanded
# by the shell inside the run, hence the single quotes.
# shellcheck disable=SC2016
login_like='exec env -i LD_PRELOAD="$LD_PRELOAD" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
  $(env | grep "^HAMI_SIM_") "$0" "$@"'
echo
echo "== 4. An empty environment (env -i, as after su - or SSH) under --limits-file-mount"
if why=$("$hami" run -q --limits-file-mount -- true 2>&1); then
  echo "    hami run --memory 1g -- env -i ... hami-memory-demo view: the limit is lost"
  "$hami" run -q --memory 1g -- sh -c "$login_like" "$memdemo" view 2>&1 | sed 's/^/      /'
  echo "    hami run --memory 1g --limits-file-mount -- env -i ... hami-memory-demo limit 1g:"
  if "$hami" run -q --memory 1g --limits-file-mount -- sh -c "$login_like" "$memdemo" limit 1g \
    2>&1 | sed 's/^/      /'; then
    passed=$((passed + 1))
  else
    echo "    -> FAILED"
    failed=$((failed + 1))
  fi
else
  echo "    skipped: $why"
  [[ $(id -u) -ne 0 ]] && echo "    (as root it needs nothing more; see docs/hami-run.md)"
  skipped=$((skipped + 1))
fi

step "5. A compute share: hami run --sm 30 -- hami-sm-demo 3 30" \
  "$hami" run -q --sm 30 -- "$build/bin/hami-sm-demo" 3 30

# The runtime's answers, checked: the budget as the total, the refusal (2 is
# cudaErrorMemoryAllocation), and a copy round trip after it.
cudart_limited() {
  local out
  out=$("$hami" run -q --memory 1g -- "$1" meminfo overcommit 2147483648 2>&1)
  echo "$out"
  grep -q '^meminfo err=0 .*total=1073741824$' <<<"$out" &&
    grep -q '^overcommit big=2 last=2 cleared=0 small=0 .*match=1' <<<"$out"
}
cudart=$build/tests/cudart_client_shared
if [[ -x $cudart ]]; then
  step "6. A CUDA runtime program (nvcc, libcudart), 1 GiB: hami run --memory 1g -- cudart_client_shared meminfo overcommit 2g" \
    cudart_limited "$cudart"
else
  echo
  echo "== 6. A CUDA runtime program built with nvcc"
  echo "    skipped: $cudart was not built (nvcc was not found when the build was configured)"
  skipped=$((skipped + 1))
fi

echo
echo "demo: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]

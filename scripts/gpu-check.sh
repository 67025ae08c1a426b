#!/usr/bin/env bash
# Validation on a machine with a real NVIDIA GPU and driver (and, optionally, PyTorch in
# python3). Builds (release), runs the tests labelled gpu and the demo on the real driver,
# then checks `hami run --memory LIMIT` from the outside: NVML (nvidia-smi, pynvml when
# present) and torch.cuda.mem_get_info() show the limit, an allocation past it raises
# torch.cuda.OutOfMemoryError, and two processes share one budget; then `hami run --sm PCT`
# on a busy-kernel program (scripts/gpu/sm_busy.cu, built with nvcc) at 25/50/75%, read from
# nvidia-smi's utilization. Ends with a table of
# check | expected | measured | pass. Every step has a timeout and no step starts after
# 9.5 minutes, so the whole run ends within 10. Never run by CI or `make test`.
#
# Usage: scripts/gpu-check.sh [LIMIT]      LIMIT: the memory limit to check (default 4g);
#        HAMI_CHECK_HOLD=1g                what the first of the two processes holds
# Exit status 0 when every check that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

limit=${1:-4g}
hold=${HAMI_CHECK_HOLD:-1g}
hami=build/bin/hami
deadline=$((SECONDS + 570))
status=0
rows=()

# Bytes of a size with an optional k/m/g/t (binary) suffix.
to_bytes() {
  local n=${1%[kKmMgGtT]} s=${1##*[0-9]}
  [[ $n =~ ^[0-9]+$ ]] || return 1
  case $s in
    "") echo "$n" ;;
    k | K) echo $((n << 10)) ;;
    m | M) echo $((n << 20)) ;;
    g | G) echo $((n << 30)) ;;
    t | T) echo $((n << 40)) ;;
    *) return 1 ;;
  esac
}
limit_bytes=$(to_bytes "$limit") || { echo "gpu-check: LIMIT '$limit' is not a size" >&2; exit 2; }
hold_bytes=$(to_bytes "$hold") || { echo "gpu-check: HAMI_CHECK_HOLD '$hold' is not a size" >&2; exit 2; }
limit_mib=$((limit_bytes >> 20))

# Runs a step for at most $1 seconds, never past the deadline.
bounded() {
  local max=$1 left=$((deadline - SECONDS))
  shift
  ((left > max)) && left=$max
  if ((left < 5)); then
    echo "skipped: out of time"
    return 124
  fi
  timeout "$left" "$@"
}
# row CHECK EXPECTED MEASURED PASS (yes, NO or skipped)
row() {
  rows+=("$1|$2|$3|$4")
  [[ $4 == NO ]] && status=1
  return 0
}

work=$(mktemp -d /tmp/hami-gpu-check-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT

echo "== machine"
if command -v nvidia-smi >/dev/null; then
  bounded 20 nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version \
    --format=csv,noheader 2>&1
else
  echo "nvidia-smi not available"
fi

echo "== build"
bounded 150 scripts/setup.sh >/dev/null || { echo "setup failed"; exit 1; }
bounded 60 cmake --preset release -DHAMI_WERROR=OFF >/dev/null || { echo "configure failed"; exit 1; }
bounded 330 cmake --build --preset release -j "$(nproc)" >/dev/null || { echo "build failed"; exit 1; }

echo "== tests labelled gpu"
if bounded 90 ctest --preset gpu --timeout 60; then
  row "tests labelled gpu (ctest --preset gpu)" "all pass" "all pass" yes
else
  row "tests labelled gpu (ctest --preset gpu)" "all pass" "failures (above)" NO
fi

echo "== demo on the real driver"
if bounded 60 scripts/demo.sh build; then
  row "make demo on the real driver" "all steps pass" "all steps pass" yes
else
  row "make demo on the real driver" "all steps pass" "failures (above)" NO
fi

echo "== NVML under hami run --memory $limit"
if command -v nvidia-smi >/dev/null; then
  out=$(bounded 30 "$hami" run -q --memory "$limit" -- nvidia-smi -i 0 \
    --query-gpu=memory.total,memory.used --format=csv,noheader,nounits 2>&1)
  echo "$out"
  total=$(echo "$out" | tail -1 | cut -d, -f1 | tr -d ' ')
  row "nvidia-smi memory.total, GPU 0" "$limit_mib MiB" "${total:-?} MiB" \
    "$([[ $total == "$limit_mib" ]] && echo yes || echo NO)"
else
  row "nvidia-smi memory.total, GPU 0" "$limit_mib MiB" "no nvidia-smi" skipped
fi
if bounded 20 python3 -c 'import pynvml' 2>/dev/null; then
  total=$(bounded 30 "$hami" run -q --memory "$limit" -- python3 -c '
import pynvml
pynvml.nvmlInit()
print(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total >> 20)' 2>&1 |
    tail -1)
  row "pynvml nvmlDeviceGetMemoryInfo total, GPU 0" "$limit_mib MiB" "$total MiB" \
    "$([[ $total == "$limit_mib" ]] && echo yes || echo NO)"
else
  row "pynvml nvmlDeviceGetMemoryInfo total, GPU 0" "$limit_mib MiB" "no pynvml" skipped
fi

# The PyTorch checks, one file with three modes: `single LIMIT` (the view and the refusal),
# `share LIMIT HOLD` (starts `hold HOLD` as a second process of the same hami run, then
# measures what is left to it). Each check prints "ROW|check|expected|measured|pass".
cat >"$work/torch_check.py" <<'PYTHON'
import subprocess
import sys
import time

import torch

MIB = 1 << 20
OOM = getattr(torch.cuda, "OutOfMemoryError", None)


def mib(n):
    return "%d MiB" % (n // MIB)


def row(check, expected, measured, ok):
    print("ROW|%s|%s|%s|%s" % (check, expected, measured, "yes" if ok else "NO"), flush=True)


def try_alloc(nbytes):
    """Allocates nbytes on GPU 0: (tensor or None, "ok" / "OutOfMemoryError" / other)."""
    try:
        t = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
        return t, "ok"
    except Exception as e:  # the kind of failure is what is checked
        if OOM is not None and isinstance(e, OOM):
            return None, "OutOfMemoryError"
        return None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:50])


def single(limit):
    free, total = torch.cuda.mem_get_info(0)
    row("torch.cuda.mem_get_info() total", mib(limit), mib(total), total == limit)
    half = (free // 2) // (2 * MIB) * (2 * MIB)
    t, outcome = try_alloc(half)
    row("torch allocates %s (half of free)" % mib(half), "ok", outcome, outcome == "ok")
    del t
    torch.cuda.empty_cache()
    _, outcome = try_alloc(limit)
    row("torch allocates %s (the whole limit)" % mib(limit), "OutOfMemoryError", outcome,
        outcome == "OutOfMemoryError")


def hold(nbytes):
    t, outcome = try_alloc(nbytes)
    free, total = torch.cuda.mem_get_info(0)
    print("ready %d %s" % (total - free, outcome), flush=True)
    sys.stdin.read()
    del t


def share(limit, nbytes):
    a = subprocess.Popen([sys.executable, __file__, "hold", str(nbytes)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    words = a.stdout.readline().split()
    if len(words) != 3 or words[0] != "ready" or words[2] != "ok":
        row("process A holds %s" % mib(nbytes), "ok", " ".join(words) or "no answer", False)
        a.kill()
        return
    a_used = int(words[1])  # A's context and what it holds, as A saw them alone
    free, total = torch.cuda.mem_get_info(0)
    b_context = total - a_used - free
    row("B's free while A uses %s (its context + hold)" % mib(a_used),
        "< %s (limit - A)" % mib(limit - a_used),
        "%s + B's context %s" % (mib(free), mib(b_context)),
        total == limit and b_context > 0)
    fits = (free - 64 * MIB) // (2 * MIB) * (2 * MIB)
    t, outcome = try_alloc(fits)
    row("B allocates %s (free - 64 MiB) while A holds" % mib(fits), "ok", outcome,
        outcome == "ok")
    del t
    torch.cuda.empty_cache()
    ask = free + nbytes // 2
    _, outcome = try_alloc(ask)
    row("B allocates %s (free + A's hold / 2) while A holds" % mib(ask), "OutOfMemoryError",
        outcome, outcome == "OutOfMemoryError")
    a.stdin.close()
    a.wait(timeout=30)
    time.sleep(0.3)  # the region returns a dead process's usage at its next sweep
    torch.cuda.empty_cache()
    t, outcome = try_alloc(ask)
    row("B allocates %s again after A exits" % mib(ask), "ok", outcome, outcome == "ok")
    del t


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "single":
        single(int(sys.argv[2]))
    elif mode == "hold":
        hold(int(sys.argv[2]))
    elif mode == "share":
        share(int(sys.argv[2]), int(sys.argv[3]))
PYTHON

echo "== PyTorch under hami run --memory $limit"
if why=$(bounded 90 python3 -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"' 2>&1); then
  for mode in "single $limit_bytes" "share $limit_bytes $hold_bytes"; do
    # shellcheck disable=SC2086  # the mode's words are the script's arguments
    out=$(bounded 120 "$hami" run -q --memory "$limit" -- python3 "$work/torch_check.py" $mode 2>&1)
    rc=$?
    grep -v '^ROW|' <<<"$out"
    while IFS='|' read -r _ check expected measured pass; do
      row "$check" "$expected" "$measured" "$pass"
    done < <(grep '^ROW|' <<<"$out")
    grep -q '^ROW|' <<<"$out" || row "torch_check.py ${mode%% *}" "rows" "exit $rc, no rows" NO
  done
else
  echo "PyTorch part skipped: torch is not importable or sees no GPU: $(tail -1 <<<"$why")"
  row "PyTorch checks" "-" "torch not usable" skipped
fi

echo "== compute (SM) limit under hami run --sm"
# A CUDA runtime program that keeps GPU 0 busy; nvidia-smi's utilization.gpu (the share of
# time a kernel runs) read every 200 ms over 3 s, after 2 s to settle.
if command -v nvidia-smi >/dev/null && [[ -x /usr/local/cuda/bin/nvcc || -n $(command -v nvcc) ]]; then
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if bounded 120 "$nvcc_bin" -O2 -o "$work/sm_busy" scripts/gpu/sm_busy.cu; then
    errors=()
    for target in 0 25 50 75; do
      sm_args=()
      [[ $target != 0 ]] && sm_args=(--sm "$target")
      bounded 20 "$hami" run -q "${sm_args[@]}" -- "$work/sm_busy" 6 >"$work/busy.out" 2>&1 &
      busy=$!
      sleep 2
      samples=$(bounded 10 nvidia-smi -i 0 --query-gpu=utilization.gpu \
        --format=csv,noheader,nounits -lms 200 2>/dev/null | head -15)
      wait "$busy"
      mean=$(awk '{s += $1; n++} END {if (n) printf "%.1f", s / n; else print "?"}' <<<"$samples")
      if [[ $target == 0 ]]; then
        row "utilization.gpu, no SM limit (baseline)" ">= 90%" "$mean%" \
          "$(awk -v m="$mean" 'BEGIN {print (m >= 90) ? "yes" : "NO"}')"
      else
        err=$(awk -v m="$mean" -v t="$target" 'BEGIN {d = m - t; if (d < 0) d = -d; printf "%.1f", d}')
        errors+=("$err")
        row "utilization.gpu under --sm $target" "$target% +/- 5" "$mean% (error $err)" \
          "$(awk -v e="$err" 'BEGIN {print (e <= 5) ? "yes" : "NO"}')"
      fi
    done
    mean_err=$(printf '%s\n' "${errors[@]}" | awk '{s += $1; n++} END {if (n) printf "%.1f", s / n}')
    row "SM limit: mean absolute error over 25/50/75" "<= 5 points" "$mean_err points" \
      "$(awk -v e="$mean_err" 'BEGIN {print (e <= 5) ? "yes" : "NO"}')"
  else
    row "SM limit checks" "-" "nvcc could not build sm_busy" NO
  fi
else
  row "SM limit checks" "-" "no nvidia-smi or nvcc" skipped
fi

echo
echo "== results (limit $limit, hold $hold)"
printf '%-56s | %-24s | %-32s | %s\n' check expected measured pass
printf '%s\n' "$(printf '%.0s-' {1..126})"
for r in "${rows[@]}"; do
  IFS='|' read -r check expected measured pass <<<"$r"
  printf '%-56s | %-24s | %-32s | %s\n' "$check" "$expected" "$measured" "$pass"
done
exit $status

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
#      and the program goes on (skipped, saying why, when nvcc was absent at configure time);
#   7. a simulated cluster (`hami sim cluster up`, two nodes with two GPUs each): the four
#      example pods applied with kubectl, their placement, limits, monitor metrics and
#      cleanup (skipped, saying why, without root or kubectl);
#   8. on the same cluster, compute shares: two pods at 30% sharing a GPU are each held to
#      their share, a pod at 25% under GPU_CORE_UTILIZATION_POLICY=force alone on a GPU is
#      capped, one at 25% under the default policy alone on a GPU is not; then
#      `hami sim cluster down` (skipped with step 7, or when its cluster did not come up);
#   9. a simulated cluster in DRA mode (`hami sim cluster up --mode dra`, one node with two
#      GPUs, hami-dra-plugin on it): the examples of examples/dra — two pods whose claims share
#      a GPU, a pod asking nvidia.com/gpu served through the DeviceClass, a pod written for the
#      device plugin rewritten by the webhook — their claims, limits and cleanup (skipped with
#      step 7).
# Exit status 0 when every step that ran passed. Usage: scripts/demo.sh [BUILD_DIR] [--cluster]
# --cluster runs steps 7 to 9 alone (the CTest demo.cluster); then 77 when they were skipped.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build=build cluster_only=0
for arg in "$@"; do
  case $arg in
    --cluster) cluster_only=1 ;;
    -*) echo "demo: unknown option '$arg' (the only option is --cluster)" >&2; exit 2 ;;
    *) build=$arg ;;
  esac
done
hami=$build/bin/hami
memdemo=$build/bin/hami-memory-demo
for f in "$hami" "$build/bin/hami-demo" "$memdemo"; do
  [[ -x $f ]] || { echo "demo: $f is missing; build first (make build)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/hami-demo-XXXXXX) || exit 1
# Steps 7 and 8 share a simulated cluster in $work/cluster; whatever way the demo ends, it goes.
# Step 9's is $work/dra-cluster.
trap '[[ -e $work/cluster ]] && "$hami" sim cluster down --dir "$work/cluster" >/dev/null 2>&1
  [[ -e $work/dra-cluster ]] && "$hami" sim cluster down --dir "$work/dra-cluster" >/dev/null 2>&1
  rm -rf "$work"' EXIT
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

# Steps 1 to 6: `hami run` on this machine's GPU (not with --cluster).
if ((!cluster_only)); then
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

# The runtime's answers, checked and said in words: the budget as the total, the refusal (2 is
# cudaErrorMemoryAllocation, reported once by cudaGetLastError), and the program going on with
# an allocation, a copy round trip and a launch. The program's raw lines only when one fails.
# field LINE KEY: the value of KEY=... on the program's LINE.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
cudart_limited() {
  local out meminfo over total free big failed=0
  out=$("$hami" run -q --memory 1g -- "$1" meminfo overcommit 2147483648 2>&1)
  meminfo=$(grep '^meminfo ' <<<"$out")
  over=$(grep '^overcommit ' <<<"$out")
  # said STATUS SENTENCE: the sentence, as proved (status 0) or failed.
  said() {
    if [[ $1 -eq 0 ]]; then echo "ok:     $2"; else echo "FAILED: $2"; failed=1; fi
  }
  total=$(field "$meminfo" total)
  free=$(field "$meminfo" free)
  echo "cudaMemGetInfo: total $((${total:-0} >> 20)) MiB, free $((${free:-0} >> 20)) MiB"
  [[ $(field "$meminfo" err) == 0 && $total == 1073741824 ]]
  said $? "cudaMemGetInfo shows the 1 GiB limit as the device's total"
  big=$(field "$over" big)
  if [[ $big == 2 ]]; then big=cudaErrorMemoryAllocation; else big="error ${big:-none}"; fi
  echo "cudaMalloc(2048 MiB), past the budget: $big"
  [[ $big == cudaErrorMemoryAllocation && $(field "$over" last) == 2 &&
    $(field "$over" cleared) == 0 ]]
  said $? "the runtime refuses an allocation past the limit, and cudaGetLastError reports it once"
  [[ $(field "$over" small) == 0 && $(field "$over" h2d) == 0 && $(field "$over" d2h) == 0 &&
    $(field "$over" match) == 1 && $(field "$over" launch) == 0 && $(field "$over" sync) == 0 ]]
  said $? "the program goes on: a 64 MiB cudaMalloc, a 1 MiB copy there and back (data intact) and a kernel launch succeed after the refusal"
  if [[ $failed -ne 0 ]]; then
    echo "the program's own lines:"
    indent <<<"$out"
  fi
  return $failed
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
fi  # cluster_only

# The cluster's helpers. poll SECONDS COMMAND...: runs COMMAND every 0.2 s until it succeeds
# (status 0) or SECONDS have passed (status 1).
poll() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}
# monitor_url NODE: the URL of NODE's hami-monitor (empty when it runs none).
monitor_url() {
  python3 -c 'import json,sys; print(next(n["monitor_url"] for n in json.load(open(sys.argv[1]))["nodes"] if n["name"] == sys.argv[2]))' "$work/cluster/cluster.json" "$1"
}
# scrape URL: the exposition hami-monitor serves at URL/metrics.
scrape() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "$1/metrics" 2>/dev/null
}
# pod_output DIR POD: what POD's container "cuda" printed, from its newest log file as the
# kubelet lays them out (DIR/logs/pods/<ns>_<pod>_<uid>/<container>/<restart>.log, written by
# containerd in the CRI log format "<time> <stream> <F|P> <text>"; kubectl logs serves it).
pod_output() {
  local f
  f=$(ls "$1"/logs/pods/default_"$2"_*/cuda/*.log 2>/dev/null | sort -V | tail -n 1)
  [[ -n $f ]] && cut -d' ' -f4- "$f"
}
# seconds_reported POD: how many seconds hami-sm-demo --every 1 has reported in POD's log.
seconds_reported() {
  local n
  n=$(pod_output "$work/cluster" "$1" | grep -c '^every ')
  echo "${n:-0}"
}
# all_reported POD=N...: whether each POD has reported at least N seconds.
all_reported() {
  local a
  for a in "$@"; do
    (($(seconds_reported "${a%=*}") >= ${a#*=})) || return 1
  done
}
# after_next_pass SECONDS NODE=URL...: waits until the hami-monitor of each NODE (its metrics
# at URL) has counted one more feedback pass than when the call began, at most SECONDS (status
# 1 when one has not); then writes each one's metrics to $work/metrics-after-pass-NODE.txt.
# One Python process, polling every 0.1 s.
after_next_pass() {
  python3 - "$work" "$@" <<'PY'
import re, sys, time, urllib.request
work, seconds = sys.argv[1], float(sys.argv[2])
nodes = dict(a.split("=", 1) for a in sys.argv[3:])
def scrape():
    return {n: urllib.request.urlopen(u + "/metrics", timeout=10).read().decode()
            for n, u in nodes.items()}
def passes(text):
    return int(re.search(r"^hami_monitor_feedback_passes_total\{[^}]*\} (\d+)$", text, re.M).group(1))
was = {n: passes(t) for n, t in scrape().items()}
deadline = time.monotonic() + seconds
texts = scrape()
while any(passes(texts[n]) <= was[n] for n in nodes):
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.1)
    texts = scrape()
for n, text in texts.items():
    with open(f"{work}/metrics-after-pass-{n}.txt", "w") as f:
        f.write(text)
PY
}

# 7. A simulated cluster: two nodes with two simulated GPUs each (`hami sim cluster up`, its
# monitors running their feedback loop every second), the four example pods applied with
# kubectl, where they landed (binpack), what each container's CUDA program and a login-style
# process in it saw and were refused, the nodes' hami-monitor metrics for them, and the cleanup
# of their directories after the pods are deleted. The cluster stays up for step 8.
cluster_demo() {
  local dir=$work/cluster ok=0 pod node url n
  "$hami" sim cluster up --dir "$dir" --nodes 2 --gpus h100-80g:2 \
    --monitor-resync-interval 2s --monitor-feedback-interval 1s | grep -v '^  started ' ||
    return 1
  export KUBECONFIG=$dir/kubeconfig
  echo "\$ kubectl get nodes"
  kubectl get nodes
  for f in vgpu-3000m-30 vgpu-half-1 vgpu-half-2 gpu-exclusive; do
    echo "\$ kubectl apply -f examples/$f.yaml"
    kubectl apply -f "examples/$f.yaml" || return 1
    kubectl wait --for=condition=Ready --timeout=60s -f "examples/$f.yaml" >/dev/null || {
      kubectl get pods -o wide
      return 1
    }
  done
  echo "\$ kubectl get pods  (node and GPU from hami-scheduler's annotations)"
  kubectl get pods -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,STATUS:.status.phase,GPU:.metadata.annotations.hami\.io/vgpu-devices-allocated'
  for pod in vgpu-3000m-30 vgpu-half-1 vgpu-half-2 gpu-exclusive; do
    echo "\$ kubectl logs $pod   (excerpt)"
    local log
    log=$(kubectl logs "$pod" 2>/dev/null || pod_output "$dir" "$pod")
    grep -E '^pod |^cuMemGetInfo|past the limit|login-style|^FAILED' <<<"$log" | sed 's/^/  /'
    grep -q '^FAILED' <<<"$log" && ok=1
    if [[ $pod != gpu-exclusive ]]; then
      n=$(grep -c 'ok: .*an allocation past the limit is refused' <<<"$log")
      [[ $n -eq 2 ]] || { echo "  -> expected the process and the env -i session refused"; ok=1; }
    fi
  done
  for node in node-1 node-2; do
    url=$(monitor_url "$node")
    if [[ -z $url ]]; then
      echo "(no hami-monitor on $node)"
      continue
    fi
    echo "\$ curl $url/metrics | grep hami_vgpu_memory   ($node's hami-monitor)"
    # The monitor scans the pods' directories every second: wait for a scrape that shows them.
    for _ in $(seq 60); do
      scrape "$url" >"$work/metrics-$node.txt"
      [[ $(grep -c '^hami_vgpu_memory_limit_bytes{.*} [1-9]' "$work/metrics-$node.txt") -ge \
        $(kubectl get pods --field-selector "spec.nodeName=$node" --no-headers | wc -l) ]] && break
      sleep 0.5
    done
    grep -E '^hami_vgpu_memory_(used|limit)_bytes\{' "$work/metrics-$node.txt" |
      grep -v '} 0$' | sed 's/^/  /'
    if command -v promtool >/dev/null; then
      promtool check metrics <"$work/metrics-$node.txt" >/dev/null 2>&1 &&
        echo "  promtool check metrics: ok" || { echo "  promtool check metrics: FAILED"; ok=1; }
    fi
  done
  echo "\$ kubectl delete pod --all"
  kubectl delete pod --all --timeout=60s || return 1
  local left
  for _ in $(seq 150); do
    left=$(find "$dir"/nodes/*/hook/vgpu/containers -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    [[ $left -eq 0 ]] && break
    sleep 0.2
  done
  if [[ $left -eq 0 ]]; then
    echo "hami-monitor removed every deleted pod's directory and limits file"
  else
    echo "-> $left container entries left after 30 s:"
    find "$dir"/nodes/*/hook/vgpu/containers -mindepth 1 -maxdepth 1
    ok=1
  fi
  return $ok
}

# 8. Compute shares on step 7's cluster. Four example pods, each pinned to a GPU with
# nvidia.com/use-gpuuuid: sm-pair-a and sm-pair-b (30% each, policy default) on node-1's first
# GPU, vgpu-force-25 (25%, GPU_CORE_UTILIZATION_POLICY=force) alone on node-1's second and
# vgpu-default-25 (25%, policy default) alone on node-2's first. Each runs hami-sm-demo --every 1:
# every second, its share of the GPU's time (NVML). Once each pod has launched for a second and
# then each node's hami-monitor has run its feedback pass, the line of the second after that is
# each pod's figure, checked against what its policy gives: the pair held to its share and the
# force pod capped (within 10 points above the share, and at least half of it, so that a pod
# that did not run fails), the default pod alone not capped (at least 60%: a process alone on an
# unlimited GPU gets about 100%). The bounds leave room for a loaded machine; on an idle one the
# figures are within a point of 30, 25 and 100. Then the pods are deleted and the cluster goes.
compute_share_demo() {
  local dir=$work/cluster ok=0 i pod node uuid
  export KUBECONFIG=$dir/kubeconfig
  local -a gpu_node=() gpu_uuid=()
  while read -r node uuid; do
    gpu_node+=("$node")
    gpu_uuid+=("$uuid")
  done < <(kubectl get nodes -o json | python3 -c '
import json, sys
for n in sorted(json.load(sys.stdin)["items"], key=lambda n: n["metadata"]["name"]):
    for d in json.loads(n["metadata"]["annotations"].get("hami.io/node-nvidia-register", "[]")):
        print(n["metadata"]["name"], d["id"])')
  if [[ ${#gpu_uuid[@]} -lt 3 ]]; then
    echo "-> expected the nodes to register at least 3 GPUs; they registered ${#gpu_uuid[@]}"
    return 1
  fi
  # Per pod: its GPU (an index into the lists above), its share, what its policy does there,
  # and the bounds its figure must fall in.
  local -a pods=(sm-pair-a sm-pair-b vgpu-force-25 vgpu-default-25) on=(0 0 1 2)
  local -a share=(30 30 25 25) low=(15 15 12 60) high=(40 40 35 100)
  local -a why=("shared GPU, held to its share" "shared GPU, held to its share"
    "alone, force: capped though alone" "alone, default: not capped")
  for i in "${!pods[@]}"; do
    pod=${pods[i]}
    echo "\$ kubectl apply -f examples/$pod.yaml   (annotated nvidia.com/use-gpuuuid=${gpu_uuid[on[i]]}, on ${gpu_node[on[i]]})"
    kubectl annotate --local -f "examples/$pod.yaml" -o yaml \
      "nvidia.com/use-gpuuuid=${gpu_uuid[on[i]]}" | kubectl apply -f - || return 1
    kubectl wait --for=condition=Ready --timeout=60s "pod/$pod" >/dev/null || {
      kubectl get pods -o wide
      return 1
    }
  done
  local -a wanted=()
  for pod in "${pods[@]}"; do wanted+=("$pod=1"); done
  if ! poll 30 all_reported "${wanted[@]}"; then
    echo "-> not every pod reported a second of launches within 30 s"
    return 1
  fi
  # Every pod has launched for a second: a pass that ends from now on began after that (a pass
  # takes milliseconds), so it saw them all active.
  if ! after_next_pass 30 "node-1=$(monitor_url node-1)" "node-2=$(monitor_url node-2)"; then
    echo "-> hami-monitor ran no feedback pass within 30 s"
    return 1
  fi
  # The second that starts once this one has ended: wholly after the pass.
  local -a from=()
  wanted=()
  for pod in "${pods[@]}"; do
    from+=($(($(seconds_reported "$pod") + 2)))
    wanted+=("$pod=${from[-1]}")
  done
  if ! poll 30 all_reported "${wanted[@]}"; then
    echo "-> the pods stopped reporting"
    return 1
  fi
  echo "each pod's share of its GPU's time (hami-sm-demo, NVML) in the second after hami-monitor's"
  echo "feedback pass saw them all launching (a pod alone on an unlimited GPU gets 100%):"
  local got inforce switch metrics
  for i in "${!pods[@]}"; do
    pod=${pods[i]}
    got=$(pod_output "$work/cluster" "$pod" | grep '^every ' |
      sed -n "${from[i]}s/.*: \([0-9]*\)% of GPU 0.*/\1/p")
    metrics=$(grep "pod=\"$pod\"" "$work/metrics-after-pass-${gpu_node[on[i]]}.txt")
    switch=$(sed -n 's/^hami_container_utilization_switch{[^}]*} //p' <<<"$metrics")
    inforce=$(sed -n 's/^hami_vgpu_core_limit_in_force_ratio{[^}]*} //p' <<<"$metrics" |
      awk '{printf "%.0f%%", $1 * 100}')
    printf '  %-15s %s %s: %3s%% of the GPU, share %s%% (in force %s, switch %s): %s; ' "$pod" \
      "${gpu_node[on[i]]}" "${gpu_uuid[on[i]]:0:12}..." "${got:-?}" "${share[i]}" "${inforce:-?}" \
      "$([[ $switch == 1 ]] && echo on || echo off)" "${why[i]}"
    if [[ -n $got ]] && ((got >= low[i] && got <= high[i])); then
      echo "ok (${low[i]}-${high[i]}%)"
    else
      echo "FAILED: not within ${low[i]}-${high[i]}%"
      ok=1
    fi
  done
  echo "\$ kubectl delete pod --all"
  kubectl delete pod --all --timeout=60s || ok=1
  echo "\$ hami sim cluster down"
  "$hami" sim cluster down --dir "$dir" | tail -1 || ok=1
  [[ ! -e $dir ]] || { echo "-> $dir was left behind"; ok=1; }
  return $ok
}
# 9. DRA: a cluster of one node with two simulated GPUs served by hami-dra-plugin, the
# DeviceClass, the examples of examples/dra applied with kubectl, their claims (device, share,
# consumed capacity), what each container's CUDA program and login-style process were held to,
# and, after the pods are deleted, their claims and every file the driver made gone.
dra_demo() {
  local dir=$work/dra-cluster ok=0 pod log n left
  "$hami" sim cluster up --mode dra --dir "$dir" --nodes 1 --gpus h100-80g:2 |
    grep -v '^  started ' || return 1
  export KUBECONFIG=$dir/kubeconfig
  echo "\$ kubectl get deviceclasses,resourceslices"
  kubectl get deviceclasses,resourceslices
  local -a pods=(dra-share-a dra-share-b dra-gpu-extended dra-vgpu-webhook)
  echo "\$ kubectl apply -f examples/dra/"
  kubectl apply -f examples/dra/ || return 1
  for pod in "${pods[@]}"; do
    kubectl wait --for=condition=Ready --timeout=120s "pod/$pod" >/dev/null || {
      kubectl get pods -o wide
      kubectl get events | grep -v Normal
      return 1
    }
  done
  echo "\$ kubectl get resourceclaims  (device, share and consumed capacity from status.allocation)"
  kubectl get resourceclaims -o custom-columns='CLAIM:.metadata.name,STATE:.status.reservedFor[0].name,DEVICE:.status.allocation.devices.results[0].device,SHARE:.status.allocation.devices.results[0].shareID,MEMORY:.status.allocation.devices.results[0].consumedCapacity.memory,CORES:.status.allocation.devices.results[0].consumedCapacity.cores'
  for pod in "${pods[@]}"; do
    echo "\$ kubectl logs $pod   (excerpt)"
    for _ in $(seq 300); do
      log=$(kubectl logs "$pod" 2>/dev/null || pod_output "$dir" "$pod")
      grep -q '^holding ' <<<"$log" && break
      sleep 0.2
    done
    grep -E '^pod |^cuMemGetInfo|past the limit|login-style|^FAILED' <<<"$log" | sed 's/^/  /'
    grep -q '^FAILED' <<<"$log" && ok=1
    if [[ $pod != dra-gpu-extended ]]; then
      n=$(grep -c 'ok: .*an allocation past the limit is refused' <<<"$log")
      [[ $n -eq 2 ]] || { echo "  -> expected the process and the env -i session refused"; ok=1; }
    fi
  done
  echo "\$ kubectl delete -f examples/dra/"
  kubectl delete -f examples/dra/ --timeout=90s >/dev/null || return 1
  for _ in $(seq 300); do
    left=$(($(kubectl get resourceclaims --no-headers 2>/dev/null | wc -l) +
      $(find "$dir"/nodes/*/cdi "$dir"/nodes/*/hook/vgpu/containers -mindepth 1 -maxdepth 1 \
        2>/dev/null | wc -l)))
    [[ $left -eq 0 ]] && break
    sleep 0.2
  done
  if [[ $left -eq 0 ]]; then
    echo "the pods' claims are deleted, and every claim's CDI spec, directory and limits file is gone"
  else
    echo "-> $left claims or files left after 60 s:"
    kubectl get resourceclaims
    find "$dir"/nodes/*/cdi "$dir"/nodes/*/hook/vgpu/containers -mindepth 1 -maxdepth 1
    ok=1
  fi
  echo "\$ hami sim cluster down"
  "$hami" sim cluster down --dir "$dir" | tail -1 || ok=1
  return $ok
}

if [[ $(id -u) -ne 0 ]]; then
  echo
  echo "== 7. A simulated cluster: hami sim cluster up, kubectl apply -f examples/"
  echo "    skipped: needs root (the nodes run containerd: namespaces, mounts, cgroups)"
  skipped=$((skipped + 1))
elif ! command -v kubectl >/dev/null; then
  echo
  echo "== 7. A simulated cluster: hami sim cluster up, kubectl apply -f examples/"
  echo "    skipped: kubectl is not installed (scripts/setup.sh installs it)"
  skipped=$((skipped + 1))
else
  step "7. A simulated cluster: hami sim cluster up, kubectl apply -f examples/, metrics, cleanup" \
    cluster_demo
fi
if [[ -e $work/cluster/cluster.json ]]; then
  step "8. Compute shares on the cluster: a pair sharing a GPU, force and default pods alone" \
    compute_share_demo
else
  echo
  echo "== 8. Compute shares on the cluster: a pair sharing a GPU, force and default pods alone"
  echo "    skipped: step 7's cluster is not up"
  skipped=$((skipped + 1))
fi

if [[ $(id -u) -eq 0 ]] && command -v kubectl >/dev/null; then
  step "9. DRA: hami sim cluster up --mode dra, kubectl apply -f examples/dra/, claims, limits, cleanup" \
    dra_demo
else
  echo
  echo "== 9. DRA: hami sim cluster up --mode dra, kubectl apply -f examples/dra/"
  echo "    skipped: as step 7 (root and kubectl needed)"
  skipped=$((skipped + 1))
fi

echo
echo "demo: $passed passed, $failed failed, $skipped skipped"
((cluster_only && passed == 0 && failed == 0)) && exit 77
[[ $failed -eq 0 ]]

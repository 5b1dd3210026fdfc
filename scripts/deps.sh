#!/usr/bin/env bash
# Installs the Debian packages corun needs to build, test and benchmark, and does
# nothing when all are present (so `make test` can call it every time). apt-get as root,
# sudo otherwise. Go (golang-go) is only for scripts/go-compare and make bench's corun-vs-Go
# sections, and is not installed here.
# Usage: scripts/deps.sh [clang]   (clang: also clang++, for `make tsa` only)
set -euo pipefail
pkgs=(g++ make pkg-config python3 libhwloc-dev hwloc libnuma-dev libjemalloc-dev doctest-dev
      systemtap-sdt-dev libfmt-dev linux-perf clang-format)
if [ "${1:-}" = clang ]; then pkgs+=(clang); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

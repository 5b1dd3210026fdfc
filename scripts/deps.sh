#!/usr/bin/env bash
# Installs the Debian packages corun needs to build, test and benchmark, and does
# nothing when all are present (so `make test` can call it every time). apt-get as root,
# sudo otherwise. Go (golang-go) is only for scripts/go-compare and make bench's corun-vs-Go
# sections, and is not installed here.
# Usage: scripts/deps.sh [clang|aarch64|bench-server|plot]
#   clang         also clang++, for `make tsa` only
#   aarch64       ONLY what `make test ARCH=aarch64` adds on an x86-64 host: Debian's cross
#                 g++ (g++-aarch64-linux-gnu), qemu-user-static to run the tests, and the
#                 arm64 builds of the libraries (libhwloc-dev:arm64 libnuma-dev:arm64
#                 systemtap-sdt-dev:arm64, whose sys/sdt.h lives in the arch's include
#                 folder) through multiarch: `dpkg --add-architecture arm64` first, once.
#                 doctest is headers only: the host's (the default mode) serves the cross
#                 build. Not libjemalloc-dev:arm64: it is not Multi-Arch: same, so apt
#                 removes the host's libjemalloc-dev to install it (the x86-64 build then
#                 fails to link); the cross build goes without jemalloc (Makefile), and
#                 apt-get runs with --no-remove here so no arm64 package can ever take a host
#                 package away. Plain `make deps` never installs these.
#   plot          ONLY python3-matplotlib, for scripts/bench-plot (make bench's plots; it
#                 runs under Debian's /usr/bin/python3, whatever python3 PATH finds). Exit
#                 status 0 even when it could not be installed: the plots are then skipped.
#   bench-server  ONLY what make bench's server section needs (scripts/bench-server: the
#                 HTTP peers and wrk): wrk nginx-light libboost-dev golang-go curl iproute2
#                 g++ make. Installed with service starts blocked (a policy-rc.d that exits
#                 101, removed afterwards), so nginx's package does not start the system
#                 nginx on port 80; the benchmark runs nginx from a private prefix. Exit
#                 status 0 even when some package could not be installed: the section
#                 skips the peers whose package is missing.
set -euo pipefail
no_remove=()
if [ "${1:-}" = plot ]; then
  pkgs=(python3-matplotlib)
elif [ "${1:-}" = aarch64 ]; then
  # libstdc++6:arm64 by name: the tests link it dynamically, and the -dev packages above
  # no longer pull it in on every machine (a fresh clone's run on 2026-12-05 found only
  # the cross copy, which the runner does not use; see the Makefile's RUNNER note).
  pkgs=(g++-aarch64-linux-gnu qemu-user-static libhwloc-dev:arm64 libnuma-dev:arm64
        systemtap-sdt-dev:arm64 libstdc++6:arm64)
  no_remove=(--no-remove)
elif [ "${1:-}" = bench-server ]; then
  pkgs=(wrk nginx-light libboost-dev golang-go curl iproute2 g++ make)
else
  pkgs=(g++ make pkg-config python3 libhwloc-dev hwloc libnuma-dev libjemalloc-dev doctest-dev
        systemtap-sdt-dev libfmt-dev linux-perf clang-format)
  if [ "${1:-}" = clang ]; then pkgs+=(clang); fi
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
if [ "${1:-}" = aarch64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  "${sudo[@]}" dpkg --add-architecture arm64  # apt-get update below then fetches arm64 lists
fi
if [ "${1:-}" = bench-server ]; then
  # Block service starts during the install; an existing policy-rc.d is left alone.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/deps.sh bench-server: no service starts during the install\nexit 101\n' |
      "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    trap '"${sudo[@]}" rm -f "$policy"' EXIT
  fi
  "${sudo[@]}" apt-get update -qq || true
  # One at a time: a package the mirror lacks must not keep the others out.
  for p in "${missing[@]}"; do
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$p" ||
      echo "deps: could not install $p (the server section skips what needs it)" >&2
  done
  exit 0
fi
if [ "${1:-}" = plot ]; then
  { "${sudo[@]}" apt-get update -qq &&
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } ||
    echo "deps: could not install ${missing[*]} (make bench skips its plots)" >&2
  exit 0
fi
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${no_remove[@]}" "${missing[@]}"

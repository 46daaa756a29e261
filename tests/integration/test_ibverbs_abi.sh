#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_ibverbs_abi.sh SOURCE_DIR: providers/uiwarp/IbverbsAbi.cmake, the configure step that picks the
# private provider ABI, against stand-in libibverbs installations (a libibverbs.pc with the
# version rdma-core writes, 1.<minor>.<release>.<n>, and a libibverbs.so.1 holding its
# IBVERBS_PRIVATE_<n> version name): known releases name the provider for their ABI and bound
# libibverbs1 to their layout; an unknown release, or a release with another ABI, fails the
# configure step and says why.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
SRC=$(cd "${1:?usage: test_ibverbs_abi.sh SOURCE_DIR}" && pwd)
command -v cmake >/dev/null || { echo "SKIP: cmake not found"; exit 77; }
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config not found"; exit 77; }
mkdir -p "$T/proj"
cat >"$T/proj/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.25)
project(abi LANGUAGES C)
include($SRC/providers/uiwarp/IbverbsAbi.cmake)
message(STATUS "provider=\${UIWARP_PROVIDER_FILE} pabi=\${UIWARP_IBVERBS_PABI}")
CM

# configure VERSION PABI: a stand-in libibverbs, then the configure step; its output in $out.
configure() {
  local d=$T/ibv-$1-$2
  mkdir -p "$d/lib/pkgconfig"
  printf '\177ELF stand-in\0IBVERBS_1.1\0IBVERBS_PRIVATE_%s\0verbs_set_ops\0' "$2" \
    >"$d/lib/libibverbs.so.$1"
  ln -sf "libibverbs.so.$1" "$d/lib/libibverbs.so.1"
  ln -sf libibverbs.so.1 "$d/lib/libibverbs.so"
  cat >"$d/lib/pkgconfig/libibverbs.pc" <<PC
libdir=$d/lib
Name: libibverbs
Description: stand-in
Version: $1
Libs: -L\${libdir} -libverbs
Cflags:
PC
  rm -rf "$T/build"
  out=$(PKG_CONFIG_PATH=$d/lib/pkgconfig PKG_CONFIG_LIBDIR=$d/lib/pkgconfig \
    cmake -S "$T/proj" -B "$T/build" 2>&1)
  rc=$?
}
known() { # VERSION PABI FIRST NEXT
  configure "$1" "$2"
  expect_eq "libibverbs $1, IBVERBS_PRIVATE_$2: configures" "0" "$rc"
  expect_match "... names libuiwarp-rdmav$2.so" "provider=libuiwarp-rdmav$2\\.so pabi=$2" "$out"
  expect_eq "... bounds libibverbs1 to [$3, $4)" "LIBIBVERBS_FIRST=$3 LIBIBVERBS_NEXT=$4" \
    "$(grep -E '^LIBIBVERBS_(FIRST|NEXT)=' "$T/build/uiwarp-abi.env" 2>/dev/null | tr '\n' ' ' |
      sed 's/ $//')"
}
known 1.14.44.0 34 36 57 # Debian 12
known 1.14.56.1 34 36 57 # Debian 13
known 1.14.35.0 34 35 36 # one op fewer than 36
known 1.15.59.0 59 59 62
known 1.16.62.0 59 62 64 # two more ops, the same PABI
known 1.18.65.0 65 65 66 # sid

configure 1.19.66.0 66
check "rdma-core 66, IBVERBS_PRIVATE_66: the configure step fails" test "$rc" -ne 0
expect_match "... saying uiwarp does not know it" "IBVERBS_PRIVATE_66, which uiwarp does not know" \
  "$(tr -s ' \n' ' ' <<<"$out")"
configure 1.18.65.0 64
check "rdma-core 65 exporting IBVERBS_PRIVATE_64: the configure step fails" test "$rc" -ne 0
expect_match "... saying the ABI is not that release's" "exports IBVERBS_PRIVATE_64" \
  "$(tr -s ' \n' ' ' <<<"$out")"
configure 1.14.34.0 34
check "rdma-core 34 (older than uiwarp knows): the configure step fails" test "$rc" -ne 0
finish

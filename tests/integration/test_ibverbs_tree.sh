#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_ibverbs_tree.sh UIWARP-MKSYSFS SHIM: stock libibverbs (ibv_devices) accepts the generated
# tree through the shim: it reads SYSFS_PATH, stat()s /dev/infiniband/uverbs0 and matches the
# device to a provider (or, with no provider installed, warns that none was found for uiwarp0).
# Without the shim the device is invisible. Needs no provider.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
MK=$1
SHIM=$2
command -v ibv_devices >/dev/null || { echo "SKIP: ibv_devices (ibverbs-utils) not installed"; exit 77; }
[[ -e /dev/infiniband/uverbs0 ]] && { echo "SKIP: host has kernel uverbs0"; exit 77; }
"$MK" -o "$T/sysfs" -l uiwarp0:lo --no-mirror
out=$(SYSFS_PATH=$T/sysfs IBV_SHOW_WARNINGS=1 LD_PRELOAD=$SHIM ibv_devices 2>&1)
expect_match "libibverbs sees uiwarp0 through the shim" "uiwarp0" "$out"
out=$(SYSFS_PATH=$T/sysfs IBV_SHOW_WARNINGS=1 ibv_devices 2>&1)
check "and skips it without the shim (no /dev/infiniband/uverbs0)" \
  test "${out/uiwarp0/}" == "$out"
finish

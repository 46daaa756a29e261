#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_sysfs.sh UIWARP-MKSYSFS: the generated tree for uiwarp0 on lo has the files libibverbs
# and the provider read, with the right contents; GUIDs are stable; kernel devices are mirrored.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
MK=$1
S=$T/sysfs
D=$S/class/infiniband/uiwarp0
P=$D/ports/1

check "generate for uiwarp0 on lo" "$MK" -o "$S" -l uiwarp0:lo --no-mirror
check "refuses to overwrite an existing tree" bash -c "! '$MK' -o '$S' -l uiwarp0:lo 2>/dev/null"
expect_eq "node_type" "4: RNIC" "$(cat "$D/node_type")"
expect_eq "class abi_version" "6" "$(cat "$S/class/infiniband_verbs/abi_version")"
expect_eq "uverbs0/ibdev" "uiwarp0" "$(cat "$S/class/infiniband_verbs/uverbs0/ibdev")"
expect_eq "uverbs0/dev is /dev/full" "1:7" "$(cat "$S/class/infiniband_verbs/uverbs0/dev")"
expect_eq "uverbs0/abi_version" "1" "$(cat "$S/class/infiniband_verbs/uverbs0/abi_version")"
expect_eq "uiwarp_netdev" "lo" "$(cat "$D/uiwarp_netdev")"
expect_eq "rdma_cm abi_version" "4" "$(cat "$S/class/misc/rdma_cm/abi_version")"
expect_eq "link_layer" "Ethernet" "$(cat "$P/link_layer")"
expect_match "port state" "^(4: ACTIVE|1: DOWN)$" "$(cat "$P/state")"
expect_eq "pkey 0" "0xffff" "$(cat "$P/pkeys/0")"
guid=$(cat "$D/node_guid")
expect_match "node_guid format" "^[0-9a-f]{4}(:[0-9a-f]{4}){3}$" "$guid"
check "node_guid is not zero" test "$guid" != "0000:0000:0000:0000"
expect_eq "sys_image_guid = node_guid" "$guid" "$(cat "$D/sys_image_guid")"

# GID 0 is fe80::<node_guid>; the GUID is the EUI-64 of the MAC (ff:fe in the middle).
gid0=$(cat "$P/gids/0")
expect_match "gid 0 format" "^[0-9a-f]{4}(:[0-9a-f]{4}){7}$" "$gid0"
expect_eq "gid 0 is fe80::<node_guid>" "fe80:0000:0000:0000:$guid" "$gid0"
g=${guid//:/}
expect_eq "guid has ff:fe in the middle" "fffe" "${g:6:4}"
n=$(ls "$P/gids" | wc -l)
expect_eq "one type per gid" "$n" "$(ls "$P/gid_attrs/types" | wc -l)"
expect_eq "one ndev per gid" "$n" "$(ls "$P/gid_attrs/ndevs" | wc -l)"
expect_eq "gid_attrs/types/0" "IB/RoCE v1" "$(cat "$P/gid_attrs/types/0")"
expect_eq "gid_attrs/ndevs/0" "lo" "$(cat "$P/gid_attrs/ndevs/0")"
if ip -4 addr show dev lo 2>/dev/null | grep -q "inet 127.0.0.1/"; then
  check "127.0.0.1 is a GID (::ffff:127.0.0.1)" \
    grep -qx "0000:0000:0000:0000:0000:ffff:7f00:0001" "$P"/gids/*
fi
if ip -6 addr show dev lo 2>/dev/null | grep -q "inet6 ::1/"; then
  check "::1 is a GID" grep -qx "0000:0000:0000:0000:0000:0000:0000:0001" "$P"/gids/*
fi

# lo has no MAC: the derived one is stable, and differs between network namespaces.
"$MK" -o "$T/again" -l uiwarp0:lo --no-mirror
expect_eq "GUID stable across runs" "$guid" "$(cat "$T/again/class/infiniband/uiwarp0/node_guid")"
"$MK" -o "$T/otherns" -l uiwarp0:lo --no-mirror --netns-inode 12345
check "GUID differs in another netns" test "$guid" != \
  "$(cat "$T/otherns/class/infiniband/uiwarp0/node_guid")"

# Kernel devices in the host sysfs are mirrored; ours are numbered after them.
H=$T/host
mkdir -p "$H/class/infiniband/mlx5_0" "$H/class/infiniband_verbs/uverbs0" \
  "$H/class/infiniband_verbs/uverbs1"
echo "1: CA" >"$H/class/infiniband/mlx5_0/node_type"
echo mlx5_0 >"$H/class/infiniband_verbs/uverbs0/ibdev"
echo 231:192 >"$H/class/infiniband_verbs/uverbs0/dev"
echo mlx5_1 >"$H/class/infiniband_verbs/uverbs1/ibdev"
echo 6 >"$H/class/infiniband_verbs/abi_version"
check "generate with a host sysfs to mirror" "$MK" -o "$T/mirror" -l uiwarp0:lo --host-sysfs "$H"
M=$T/mirror/class
check "kernel device mirrored as a symlink" test -L "$M/infiniband/mlx5_0"
expect_eq "and readable through it" "1: CA" "$(cat "$M/infiniband/mlx5_0/node_type")"
expect_eq "kernel uverbs0 mirrored" "231:192" "$(cat "$M/infiniband_verbs/uverbs0/dev")"
expect_eq "ours numbered after the kernel's" "uiwarp0" "$(cat "$M/infiniband_verbs/uverbs2/ibdev")"
check "no host sysfs: nothing mirrored" test ! -e "$S/class/infiniband/mlx5_0"
finish
